"""The VM lab: Debian guests under QEMU, for the kernel datapath (README "VM lab")."""
