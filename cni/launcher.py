"""``netplugin-cni install [--launcher auto|perl|python] DIR``: write DIR/netplugin-cni, the
executable a runtime execs for every call, so its start is part of every pod's ADD and DEL.

Two launchers, both handing the call to cni.main:
- **perl** (the default where /usr/bin/perl is; Debian and Ubuntu always have it, perl-base
  being essential): it does the fast path itself, with Perl's built-in socket calls and no
  module, which starts in about 2 ms against Python's 10 to 15. It hands ADD, DEL and
  CHECK to the agent's socket as cni.main's fast path does (``POST /cni/exec``, the CNI_*
  variables and stdin unparsed) and prints the answer with the exit status the agent names.
  Everything else it pipes to Python's full path (cni.main with the same stdin): VERSION, a
  configuration that may name its own "socket", an answer without an exit status, and an
  agent that does not answer, whose reason it passes in $NETPLUGIN_CNI_FAILED so that the
  checks run first and the error says why, without asking the agent twice.
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
# SOCK_STREAM on Linux; a sockaddr_un is the family, then the path.
PERL_LAUNCHER = r"""#!{perl}
# netplugin-cni, written by `netplugin-cni install`: ADD, DEL and CHECK go to the agent's
# socket from here; anything else, and an agent that does not answer, to the plugin's
# Python ({python}, importing it from {root}). Its start is part of every pod's.
binmode STDIN;
binmode STDOUT;
$SIG{{PIPE}} = 'IGNORE';
delete $ENV{{{failed}}};
my $in = do {{ local $/; <STDIN> }};
$in = '' unless defined $in;

sub python {{
    alarm 0;
    $ENV{{{failed}}} = $_[0] if defined $_[0];
    my $code = 'import sys; sys.path.insert(0, sys.argv.pop(1)); '
        . 'from cni.main import main; main()';
    open(my $py, '|-', {python_q}, '-IS', '-c', $code, {root_q}) or do {{
        print STDERR "netplugin-cni: cannot run {python}: $!\n";
        exit 1;
    }};
    binmode $py;
    print $py $in;
    close $py;
    exit($? & 127 ? 1 : $? >> 8);
}}

my $cmd = defined $ENV{{CNI_COMMAND}} ? $ENV{{CNI_COMMAND}} : '';
python() if $cmd eq 'VERSION' || index($in, 'socket') >= 0 || index($in, "\\") >= 0;
my $path = $ENV{{{socket_env}}} || '{socket}';
my $body = join('', map {{ "$_=$ENV{{$_}}\0" }} grep {{ /^CNI_/ }} keys %ENV) . "\0" . $in;
$SIG{{ALRM}} = sub {{ python('timed out') }};
alarm {timeout};
socket(AGENT, 1, 1, 0) or python("$!");
connect(AGENT, pack('S Z*', 1, $path)) or python("$!");
my $ask = "POST {url} HTTP/1.0\r\nHost: netplugin\r\n"
    . "Content-Type: application/octet-stream\r\nContent-Length: " . length($body)
    . "\r\n\r\n" . $body;
while (length $ask) {{
    my $n = syswrite(AGENT, $ask);
    python("$!") unless defined $n;
    substr($ask, 0, $n) = '';
}}
shutdown(AGENT, 1);
my $answer = '';
while (1) {{
    my $n = sysread(AGENT, $answer, 65536, length $answer);
    python("$!") unless defined $n;
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
python();
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
        python=python,
        root=root,
        python_q=_perl_str(python),
        root_q=_perl_str(root),
        failed=main.FAILED_ENV,
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
