#!/bin/bash
ip netns del bgpspk-r 2>/dev/null; ip netns del bgpspk-h 2>/dev/null; true
