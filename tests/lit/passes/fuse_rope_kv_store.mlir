// RUN: llmc-opt %s -split-input-file --llm-fuse-rope-kv-store | FileCheck %s
// RUN: llmc-opt %s -split-input-file --llm-fuse-rope-kv-store --llm-plan-memory | FileCheck %s --check-prefix=PLANNED

// A fused q|k|v projection (GQA 4/2, llama3 rope, interleaved, int8 cache after the layout
// pass): split, both ropes and the store become one op in the store's place, carrying the q
// rope's attributes and the store's layer and layout; attention reads its q.
// CHECK-LABEL: func.func @fused
// CHECK:      %[[QKV:.*]] = llm.linear
// CHECK-NEXT: %[[Q:.*]], %[[KV:.*]] = llm.rope_kv_store %[[QKV]], %arg1, %arg3, %arg2 {block_size = 16 : i64, factor = 8.000000e+00 : f64, head_dim = 16 : i64, kv_dtype = "int8", layer = 3 : i64, layout = "block_head_slot_dim", low_freq_factor = 2.000000e+00 : f64, num_heads = 4 : i64, num_kv_heads = 2 : i64, original_max_position = 8192 : i64, rope_type = "llama3", style = "interleaved", theta = 5.000000e+05 : f64} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x64xf32>
// CHECK-NEXT: llm.paged_attention %[[Q]], %[[KV]], %arg2
// CHECK-NOT:  llm.split
// CHECK-NOT:  llm.rope
// CHECK-NOT:  llm.kv_store
// PLANNED-LABEL: func.func @fused
// PLANNED-SAME: llm.arena_bytes_per_token = 1024
// PLANNED: llm.linear {{.*}}llm.arena_offsets = [0]
// PLANNED: llm.rope_kv_store {{.*}}llm.arena_offsets = [512, -1]
// qkv lives as long as q: the GPU's decode attention may do the rope_kv_store's work, reading
// qkv in place of q (plan Step.rope_kernel), so its output does not take qkv's bytes (@0, the
// best fit once qkv died).
// PLANNED: llm.paged_attention {{.*}}llm.arena_offsets = [768]
func.func @fused(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %batch: !llm.batch, %kv: !llm.kv_cache, %h: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %w = llm.weight "qkv" : tensor<128x64xf32>
  %qkv = llm.linear %h, %w : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %q, %k, %v = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = llm.rope %q, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 500000.0 : f64, style = "interleaved", rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 2.0 : f64, high_freq_factor = 4.0 : f64, original_max_position = 8192 : i64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = llm.rope %k, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 500000.0 : f64, style = "interleaved", rope_type = "llama3", factor = 8.0 : f64, low_freq_factor = 2.0 : f64, high_freq_factor = 4.0 : f64, original_max_position = 8192 : i64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr, %v, %kv, %batch {layer = 3 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, block_size = 16 : i64, kv_dtype = "int8", layout = "block_head_slot_dim"} : tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.paged_attention %qr, %kv1, %batch {layer = 3 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64, block_size = 16 : i64, kv_dtype = "int8", layout = "block_head_slot_dim"} : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// The ropes rotate differently (theta): nothing is fused.
// CHECK-LABEL: func.func @different_rotations
// CHECK: llm.split
// CHECK: llm.rope
// CHECK: llm.rope
// CHECK: llm.kv_store
// CHECK-NOT: llm.rope_kv_store
func.func @different_rotations(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %batch: !llm.batch, %kv: !llm.kv_cache, %qkv: tensor<?x128xf32>) -> tensor<?x64xf32> {
  %q, %k, %v = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = llm.rope %q, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = llm.rope %k, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 20000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr, %v, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.paged_attention %qr, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// Per-head q/k norms between the split and the ropes (Qwen3): not matched.
// CHECK-LABEL: func.func @normed_heads
// CHECK: llm.rms_norm
// CHECK: llm.kv_store
// CHECK-NOT: llm.rope_kv_store
func.func @normed_heads(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %batch: !llm.batch, %kv: !llm.kv_cache, %qkv: tensor<?x128xf32>) -> tensor<?x64xf32> {
  %q, %k, %v = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qn_w = llm.weight "q_norm" : tensor<16xf32>
  %kn_w = llm.weight "k_norm" : tensor<16xf32>
  %qn = llm.rms_norm %q, %qn_w {eps = 1.0e-6 : f64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
  %kn = llm.rms_norm %k, %kn_w {eps = 1.0e-6 : f64} : (tensor<?x32xf32>, tensor<16xf32>) -> tensor<?x32xf32>
  %qr = llm.rope %qn, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = llm.rope %kn, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr, %v, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.paged_attention %qr, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// The rotated q is read before the store (it could not move there), the rotated k is read
// twice: neither layer is fused.
// CHECK-LABEL: func.func @other_readers
// CHECK-NOT: llm.rope_kv_store
func.func @other_readers(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %batch: !llm.batch, %kv: !llm.kv_cache, %qkv: tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>) {
  %q, %k, %v = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr = llm.rope %q, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %early = llm.add %qr, %qr : tensor<?x64xf32>
  %kr = llm.rope %k, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr, %v, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.paged_attention %early, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %q2, %k2, %v2 = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qr2 = llm.rope %q2, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr2 = llm.rope %k2, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv2 = llm.kv_store %kr2, %v2, %kv1, %batch {layer = 1 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %o2 = llm.paged_attention %qr2, %kv2, %batch {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o2, %kr2 : tensor<?x64xf32>, tensor<?x32xf32>
}
