"""Small pieces shared by every netplugin command."""
