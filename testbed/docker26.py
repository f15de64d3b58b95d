"""Docker 26 beside the host's Docker 20.10: Debian 13's `docker.io`, fetched by package name.

Users run Docker 24-28, the host has Debian 12's 20.10. The tests run a second daemon:
Debian 13's (trixie) `docker.io` (26.1.x), fetched with apt by package name through a
private apt directory (a trixie source list of our own, its lists and archives; the
system's apt state is never touched), signed by the keys of Debian's archive keyring, and
extracted with ``dpkg-deb -x``. Its dockerd runs with Debian 12's containerd and runc (what
the host's docker.io brought).

The extracted package is kept under /var/cache/netplugin/docker.io/VERSION, VERSION being
the package's; ``current`` names the one in use. A fresh ``current`` (younger than a day) is
used without asking the archive; an older one is checked against the archive's candidate,
and used as it is when the archive cannot be reached. Callers in several processes at once
(pytest workers, CI, a developer) take a flock: one fetches, the others wait, then use it.

    python -m testbed.docker26      # fetch if needed; print the dockerd's path

The mirror is the one the system's own apt sources use for Debian (no host is named here).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = "docker.io"
SUITE = "trixie"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
CACHE = Path(os.environ.get("NETPLUGIN_CACHE", "/var/cache/netplugin")) / PACKAGE
FRESH = 24 * 3600.0  # seconds a fetched ``current`` is used without asking the archive
SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class FetchError(RuntimeError):
    """Docker 26 could not be fetched; the message says what failed."""


def debian_mirror(sources: str, codename: str) -> str | None:
    """The URI of the first Debian source (main, for ``codename``, not its -security or
    -updates) in apt source text: one-line ``deb`` entries or deb822 stanzas."""
    for line in sources.splitlines():
        m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
        if m and m[2] == codename and "main" in m[3].split():
            return m[1]
    for stanza in re.split(r"\n\s*\n", sources):
        fields = {
            k.strip().lower(): v.split()
            for k, _, v in (ln.partition(":") for ln in stanza.splitlines() if ":" in ln)
            if not k.lstrip().startswith("#")
        }
        if (
            "deb" in fields.get("types", [])
            and codename in fields.get("suites", [])
            and "main" in fields.get("components", [])
            and fields.get("uris")
        ):
            return fields["uris"][0]
    return None


def system_sources() -> str:
    """The text of the system's apt sources (every file, one after the other)."""
    texts = []
    for src in SOURCES:
        files = (
            sorted(src.glob("*.list")) + sorted(src.glob("*.sources")) if src.is_dir() else [src]
        )
        for f in files:
            if f.is_file():
                texts.append(f.read_text())
    return "\n\n".join(texts)


def codename() -> str:
    text = Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=\"?(\w+)", text, re.M)
    if not m:
        raise FetchError("/etc/os-release names no VERSION_CODENAME")
    return m[1]


def candidate(policy: str) -> str | None:
    """The candidate version in ``apt-cache policy PACKAGE`` output."""
    m = re.search(r"^\s*Candidate:\s*(\S+)", policy, re.M)
    return m[1] if m and m[1] != "(none)" else None


class Apt:
    """apt-get and apt-cache on a private directory: its own source list, lists and archives."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def options(self) -> list[str]:
        r = self.root
        return [
            "-o", f"Dir::Etc::sourcelist={r / 'sources.list'}",
            "-o", "Dir::Etc::sourceparts=-",
            "-o", f"Dir::State::Lists={r / 'lists'}",
            "-o", "Dir::State::status=/dev/null",
            "-o", f"Dir::Cache={r / 'cache'}",
            # The download is written by root into our own directory, not by user _apt.
            "-o", "APT::Sandbox::User=root",
        ]  # fmt: skip

    def prepare(self, mirror: str) -> None:
        for d in ("lists/partial", "cache/archives/partial"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        line = f"deb [signed-by={KEYRING}] {mirror} {SUITE} main\n"
        (self.root / "sources.list").write_text(line)

    def run(self, tool: str, *args: str, cwd: Path | None = None, timeout: float = 300) -> str:
        cmd = [tool, *self.options(), *args]
        res = subprocess.run(
            cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
        )
        out = res.stdout + res.stderr
        # A source whose signature does not verify fails update (E:), with the key named.
        signed = any(w in out for w in ("NO_PUBKEY", "not signed", "EXPKEYSIG"))
        if res.returncode != 0:
            hint = (
                f"\n{KEYRING} lacks the {SUITE} archive key: `apt-get install "
                "debian-archive-keyring` (Debian 12's 2023.3+deb12u2 and later have it)"
                if signed
                else ""
            )
            raise FetchError(f"{' '.join([tool, *args])} failed ({res.returncode}):\n{out}{hint}")
        return out


def _fetch_version(apt: Apt, version: str) -> Path:
    """Download and extract ``PACKAGE=version`` into CACHE/version (atomically)."""
    dest = CACHE / version
    if (dest / "usr/sbin/dockerd").exists():
        return dest
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=CACHE))
    try:
        apt.run("apt-get", "download", f"{PACKAGE}={version}", cwd=work)
        debs = list(work.glob("*.deb"))
        if len(debs) != 1:
            raise FetchError(f"apt-get download {PACKAGE}={version} left {debs}")
        tree = work / "tree"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tree)], check=True, timeout=120)
        dockerd = tree / "usr/sbin/dockerd"
        res = subprocess.run([str(dockerd), "--version"], capture_output=True, text=True)
        if res.returncode != 0:
            raise FetchError(f"{PACKAGE} {version}'s dockerd does not run here: {res.stderr}")
        tree.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def _current() -> Path | None:
    try:
        version = (CACHE / "current").read_text().strip()
    except OSError:
        return None
    tree = CACHE / version
    return tree if version and (tree / "usr/sbin/dockerd").exists() else None


def _fresh(tree: Path | None) -> bool:
    return tree is not None and time.time() - (CACHE / "current").stat().st_mtime < FRESH


def fetch() -> Path:
    """The root of the extracted package (``usr/sbin/dockerd`` in it): cached, or fetched."""
    tree = _current()
    if _fresh(tree):
        return tree  # type: ignore[return-value]
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        tree = _current()
        if _fresh(tree):  # another caller fetched it while we waited
            return tree  # type: ignore[return-value]
        apt = Apt(CACHE / "apt")
        try:
            mirror = debian_mirror(system_sources(), codename())
            if mirror is None:
                raise FetchError(f"no Debian source for {codename()} main in {SOURCES}")
            apt.prepare(mirror)
            apt.run("apt-get", "update")
            version = candidate(apt.run("apt-cache", "policy", PACKAGE))
            if version is None:
                raise FetchError(f"{SUITE} has no {PACKAGE}")
            tree = _fetch_version(apt, version)
        except (FetchError, OSError, subprocess.SubprocessError) as e:
            if tree is None:
                raise FetchError(f"cannot fetch {PACKAGE} from {SUITE}: {e}") from e
            print(f"docker26: using the cached {tree.name}: {e}", file=sys.stderr)
            return tree
        tmp = CACHE / "current.tmp"
        tmp.write_text(tree.name + "\n")
        tmp.rename(CACHE / "current")  # and its mtime says when the archive was asked
        for old in CACHE.iterdir():  # earlier versions (a running dockerd keeps its inode)
            if old.is_dir() and old not in (tree, apt.root):
                shutil.rmtree(old, ignore_errors=True)
        return tree


def dockerd_command() -> list[str]:
    """dockerd 26 and the arguments that pick the package's own helpers."""
    tree = fetch()
    return [
        str(tree / "usr/sbin/dockerd"),
        "--userland-proxy-path",
        str(tree / "usr/sbin/docker-proxy"),
    ]


if __name__ == "__main__":
    print(fetch() / "usr/sbin/dockerd")
