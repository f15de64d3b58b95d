"""netplugin datapath."""
