"""The stand-ins of NVIDIA's command line tools that the simulated packages install on the
simulated nodes under the real names (``/usr/bin/nvidia-smi``, ``dcgmi``, ``nvidia-ctk``,
``/usr/local/cuda-X.Y/bin/nvcc``; ``/usr/local/bin/nvbandwidth``, which no package ships).
Each module is standard-library only (plus the stdlib-only ``provisioner`` modules it imports)
and is installed by ``provisioner.sim.bundle`` as one executable file; ``daemon.sh`` is the
idle daemon behind the simulated services.
"""
