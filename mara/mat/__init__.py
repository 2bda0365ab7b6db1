"""MAT allocator (§4.2): task-slot encoder, autoregressive node decoder, PPO + GAE training."""
