#!/bin/bash
# Two namespaces: bgpspk-r (router, FRR, AS 65000, 50.1.1.2) and bgpspk-h (host, speaker, AS 65001, 50.1.1.1)
set -e
ip netns add bgpspk-r
ip netns add bgpspk-h
ip link add bgpspk-rv type veth peer name bgpspk-hv
ip link set bgpspk-rv netns bgpspk-r
ip link set bgpspk-hv netns bgpspk-h
ip -n bgpspk-r addr add 50.1.1.2/24 dev bgpspk-rv
ip -n bgpspk-h addr add 50.1.1.1/24 dev bgpspk-hv
ip -n bgpspk-r -6 addr add fd50::2/64 dev bgpspk-rv nodad
ip -n bgpspk-h -6 addr add fd50::1/64 dev bgpspk-hv nodad
for n in bgpspk-r bgpspk-h; do ip -n $n link set lo up; done
ip -n bgpspk-r link set bgpspk-rv up
ip -n bgpspk-h link set bgpspk-hv up
# a "data centre" address on the router side to originate
ip -n bgpspk-r addr add 192.0.2.1/24 dev lo
