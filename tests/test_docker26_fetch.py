"""testbed/docker26.py's pure parts: which mirror the system's apt sources name, and the
candidate version apt-cache reports."""

from __future__ import annotations

from testbed.docker26 import candidate, debian_mirror

DEB822 = """\
Types: deb
# a comment: the snapshot this image was made from
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_the_mirror_of_the_systems_own_suite_in_deb822_sources() -> None:
    assert debian_mirror(DEB822, "bookworm") == "http://mirror.example/debian"


def test_security_and_other_suites_are_not_the_mirror() -> None:
    security_first = DEB822.split("\n\n")[1] + "\n\n" + DEB822.split("\n\n")[0]
    assert debian_mirror(security_first, "bookworm") == "http://mirror.example/debian"
    assert debian_mirror(DEB822, "trixie") is None


def test_one_line_sources_with_options() -> None:
    text = (
        "deb [arch=amd64] https://other.example/apt cloud-sdk main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
    )
    assert debian_mirror(text, "bookworm") == "http://mirror.example/debian"


def test_a_source_without_main_is_not_debians() -> None:
    assert debian_mirror("deb http://x.example/d bookworm contrib\n", "bookworm") is None


def test_candidate_version() -> None:
    policy = (
        "docker.io:\n  Installed: (none)\n  Candidate: 26.1.5+dfsg1-9+deb13u1+b1\n"
        "  Version table:\n     26.1.5+dfsg1-9+deb13u1+b1 500\n"
    )
    assert candidate(policy) == "26.1.5+dfsg1-9+deb13u1+b1"
    assert candidate("docker.io:\n  Installed: (none)\n  Candidate: (none)\n") is None
    assert candidate("") is None
