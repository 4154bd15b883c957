#!/bin/sh
# SIMULATED daemon (gpu-cluster-provisioner) standing in for @NAME@: stays up so systemd can
# supervise it; does nothing else. Shell, not Python: it stays resident for the node's life, and
# a sleeping sh costs a fraction of an idle interpreter (there is no logic here to lint).
echo "@NAME@ (SIMULATED) started"
@BEFORE_IDLE@
exec sleep infinity
