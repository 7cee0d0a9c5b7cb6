// The example's model: a small CNN for 28x28 grey images, 10 classes (about 107k parameters).
// bench/ddp/torch_ddp.py builds the same network in Python; keep the two in step.
#pragma once

#include <torch/torch.h>

namespace dtlaunch::train {

struct FashionCnnImpl : torch::nn::Module {
  FashionCnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 5 * 5, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  // [N, 1, 28, 28] -> logits [N, 10]
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // 16 x 13 x 13
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // 32 x 5 x 5
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(FashionCnn);

}  // namespace dtlaunch::train
