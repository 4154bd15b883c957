// Compiled (not run) before nccl-tests are built: proves the node's nvcc can compile CUDA.
#include <cstdio>

__global__ void probe(int *out) { out[threadIdx.x] = threadIdx.x; }

int main() {
  int *out = nullptr;
  cudaMalloc(&out, 32 * sizeof(int));
  probe<<<1, 32>>>(out);
  cudaFree(out);
  std::printf("ok\n");
  return 0;
}
