#!/bin/bash
# start zebra + bgpd inside bgpspk-r, all state under /tmp/bgpspike/frr
D=/tmp/bgpspike/frr
chown -R frr:frr $D
ip netns exec bgpspk-r /usr/lib/frr/zebra -d -u frr -g frr -i $D/zebra.pid -z $D/zserv.api --vty_socket $D -f $D/frr.conf -A 127.0.0.1 -P 0
sleep 1
ip netns exec bgpspk-r /usr/lib/frr/bgpd -d -u frr -g frr -i $D/bgpd.pid -z $D/zserv.api --vty_socket $D -f $D/frr.conf -A 127.0.0.1 -P 0 -l 50.1.1.2 -l fd50::2
sleep 1
cat $D/zebra.pid $D/bgpd.pid
