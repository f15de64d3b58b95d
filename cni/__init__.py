"""netplugin-cni: the CNI plugin executable. It holds no state: it hands each call to the
netplugin agent of its host over a unix socket (the agent owns the datapath), as Contiv's
contivk8s did."""
