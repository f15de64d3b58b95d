"""The VM lab: Debian 12 guests under QEMU with the stock kernel, for the kernel datapath."""
