"""netplugin plugin."""
