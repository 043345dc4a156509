// Nothing: ddpd_torch_pch exists to compile the precompiled LibTorch headers (torch_pch.cmake).
