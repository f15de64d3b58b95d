"""``netplugin-cni install [--launcher auto|perl|python] DIR``: write DIR/netplugin-cni, the
executable a runtime execs for every call, so its start is part of every pod's ADD and DEL.

Two launchers, both handing the call to cni.main:
- **perl** (the default where /usr/bin/perl is; Debian and Ubuntu always have it, perl-base
  being essential): it does the fast path itself, with Perl's built-in socket calls and no
  module, which starts in about 2 ms against Python's 10 to 15. It hands ADD, DEL and
  CHECK to the agent's socket as cni.main's fast path does (``POST /cni/exec``, the CNI_*
  variables and stdin unparsed) and prints the answer with the exit status the agent names.
  Everything else goes to Python's full path, which the launcher's process becomes (exec:
  a runtime that kills the plugin kills it), with the same stdin: VERSION, a configuration
  that may name its own "socket", arguments (``install``), and an agent that did not
  answer, or answered without an exit status, which it says in cni.main's arguments
  (FAILED_ARG with the reason, NO_EXIT_ARG), so that the checks run first and the error
  says why, without asking the agent again.
- **python**: Python without site-packages (``-IS``), importing cni.main from this
  installation; about a third of the console script's start.
"""

from __future__ import annotations

import os
import sys

KINDS = ("auto", "perl", "python")
PERL = "/usr/bin/perl"

PYTHON_LAUNCHER = """#!{python} -IS
# netplugin-cni, written by `netplugin-cni install`: Python without site-packages (-IS),
# importing the plugin from {root}.
import sys
sys.path.insert(0, {root!r})
from cni.main import main
main()
"""

# Perl's builtins only (no `use`: strict alone costs a module load); 1 is AF_UNIX and
# SOCK_STREAM on Linux (not MIPS); a sockaddr_un is the family, then the path. Paths are
# written in as single-quoted Perl strings, and nowhere else.
PERL_LAUNCHER = r"""#!{perl}
# netplugin-cni, written by `netplugin-cni install`: ADD, DEL and CHECK go to the agent's
# socket from here; anything else, and an agent that does not answer, to the plugin's
# Python, which this process becomes. Its start is part of every pod's.
binmode STDIN;
binmode STDOUT;
$SIG{{PIPE}} = 'IGNORE';
my $in = '';

# Become the plugin's Python (it exits as the call's status), with the call's stdin on a
# pipe fed by a child, and @_ as its arguments (why the agent was not asked, or failed).
sub python {{
    alarm 0;
    close AGENT;
    my ($r, $w);
    pipe($r, $w) or die "netplugin-cni: pipe: $!\n";
    my $writer = fork();
    die "netplugin-cni: fork: $!\n" unless defined $writer;
    if ($writer == 0) {{
        close $r;
        binmode $w;
        print $w $in;
        close $w;
        exit 0;
    }}
    close $w;
    open(STDIN, '<&', $r) or die "netplugin-cni: stdin: $!\n";
    my $code = 'import sys; sys.path.insert(0, sys.argv.pop(1)); '
        . 'from cni.main import main; main()';
    exec({python_q}, '-IS', '-c', $code, {root_q}, @_)
        or die 'netplugin-cni: cannot run ' . {python_q} . ": $!\n";
}}

python(@ARGV) if @ARGV;  # `install DIR` and the like
$in = do {{ local $/; <STDIN> }};
$in = '' unless defined $in;
my $cmd = defined $ENV{{CNI_COMMAND}} ? $ENV{{CNI_COMMAND}} : '';
python() if $cmd eq 'VERSION' || index($in, 'socket') >= 0 || index($in, "\\") >= 0;
my $path = $ENV{{{socket_env}}} || '{socket}';
my $body = join('', map {{ "$_=$ENV{{$_}}\0" }} grep {{ /^CNI_/ }} keys %ENV) . "\0" . $in;
$SIG{{ALRM}} = sub {{ python('{failed}', 'timed out') }};
alarm {timeout};
socket(AGENT, 1, 1, 0) or python('{failed}', "$!");
connect(AGENT, pack('S Z*', 1, $path)) or python('{failed}', "$!");
my $ask = "POST {url} HTTP/1.0\r\nHost: netplugin\r\n"
    . "Content-Type: application/octet-stream\r\nContent-Length: " . length($body)
    . "\r\n\r\n" . $body;
while (length $ask) {{
    my $n = syswrite(AGENT, $ask);
    python('{failed}', "$!") unless defined $n;
    substr($ask, 0, $n) = '';
}}
shutdown(AGENT, 1);
my $answer = '';
while (1) {{
    my $n = sysread(AGENT, $answer, 65536, length $answer);
    python('{failed}', "$!") unless defined $n;
    last unless $n;
}}
alarm 0;
my $at = index($answer, "\r\n\r\n");
if ($at >= 0) {{
    for (split /\r\n/, substr($answer, 0, $at)) {{
        if (/^{exit_header}:\s*(\d+)\s*$/i) {{
            print substr($answer, $at + 4);
            exit $1;
        }}
    }}
}}
python('{no_exit}');  # answered, but not as an agent of this version
"""


def _perl_str(s: str) -> str:
    """``s`` as a Perl single-quoted string."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def launcher(kind: str, python: str, root: str) -> str:
    """The text of the ``kind`` launcher ("perl" or "python"), running ``python`` with the
    plugin imported from ``root``."""
    from cni import main

    if kind == "python":
        return PYTHON_LAUNCHER.format(python=python, root=root)
    if kind != "perl":
        raise ValueError(f"no launcher {kind!r}: {' or '.join(KINDS[1:])}")
    return PERL_LAUNCHER.format(
        perl=PERL,
        python_q=_perl_str(python),
        root_q=_perl_str(root),
        failed=main.FAILED_ARG,
        no_exit=main.NO_EXIT_ARG,
        socket_env=main.SOCKET_ENV,
        socket=main.DEFAULT_SOCKET,
        timeout=int(main.TIMEOUT),
        url=main.EXEC_URL,
        exit_header=main.EXIT_HEADER.decode(),
    )


def chosen(kind: str) -> str:
    """The launcher ``kind`` ("auto": perl where it is installed, else python)."""
    if kind == "auto":
        return "perl" if os.access(PERL, os.X_OK) else "python"
    return kind


def install(directory: str, kind: str = "auto") -> str:
    """Write ``directory``/netplugin-cni, the ``kind`` launcher (replacing what is there
    whole); its path."""
    import cni

    root = os.path.dirname(os.path.dirname(os.path.abspath(cni.__file__)))
    text = launcher(chosen(kind), sys.executable, root)
    target = os.path.join(directory, "netplugin-cni")
    staged = f"{target}.{os.getpid()}.tmp"
    with open(staged, "w") as f:
        f.write(text)
    os.chmod(staged, 0o755)
    os.replace(staged, target)
    return target


USAGE = "usage: netplugin-cni install [--launcher auto|perl|python] DIR  (e.g. /opt/cni/bin)\n"


def install_main(args: list[str]) -> int:
    kind = "auto"
    if args[:1] == ["--launcher"] and len(args) > 1:
        kind, args = args[1], args[2:]
    if len(args) != 1 or kind not in KINDS:
        sys.stderr.write(USAGE)
        return 2
    try:
        print(install(args[0], kind))
    except OSError as e:
        sys.stderr.write(f"netplugin-cni install: {e}\n")
        return 1
    return 0
