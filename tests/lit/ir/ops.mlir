// RUN: llmc-opt %s | FileCheck %s
// Round trip through the custom form, then the generic form.
// RUN: llmc-opt %s | llmc-opt | FileCheck %s
// RUN: llmc-opt %s --mlir-print-op-generic | llmc-opt | FileCheck %s

// CHECK-LABEL: func.func @types
// CHECK-SAME: (%{{.*}}: !llm.batch, %{{.*}}: !llm.kv_cache) -> (!llm.batch, !llm.kv_cache)
func.func @types(%b: !llm.batch, %kv: !llm.kv_cache) -> (!llm.batch, !llm.kv_cache) {
  return %b, %kv : !llm.batch, !llm.kv_cache
}

// CHECK-LABEL: func.func @every_op
func.func @every_op(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
                    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  // CHECK: %[[EMB:.*]] = llm.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  %emb = llm.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  // CHECK: %[[X:.*]] = llm.embedding %{{.*}}, %[[EMB]] : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %x = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %ln = llm.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
  // CHECK: llm.rms_norm %[[X]], %{{.*}} {eps = 1.000000e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %h = llm.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq = llm.weight "q" : tensor<64x64xf32>
  %wk = llm.weight "k" : tensor<32x64xf32>
  %wv = llm.weight "v" : tensor<32x64xf32>
  %bq = llm.weight "qb" : tensor<64xf32>
  %bk = llm.weight "kb" : tensor<32xf32>
  %bv = llm.weight "vb" : tensor<32xf32>
  // CHECK: %[[WQKV:.*]] = llm.weight_concat %{{.*}}, %{{.*}}, %{{.*}} : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
  %wqkv = llm.weight_concat %wq, %wk, %wv {axis = 0 : i64} : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
  // CHECK: %[[BQKV:.*]] = llm.weight_concat %{{.*}}, %{{.*}}, %{{.*}} : (tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<128xf32>
  %bqkv = llm.weight_concat %bq, %bk, %bv : (tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<128xf32>
  // CHECK: %[[QKV:.*]] = llm.linear %{{.*}}, %[[WQKV]], %[[BQKV]] : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  %qkv = llm.linear %h, %wqkv, %bqkv : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  // CHECK: llm.permute_columns %{{.*}} perm [1, 0, 3, 2, 4, 5, 6, 7{{.*}}] : tensor<?x64xf32> -> tensor<?x64xf32>
  %hp = llm.permute_columns %h perm [1, 0, 3, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63] : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK: %[[Q:.*]]:3 = llm.split %[[QKV]] sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %q, %k, %v = llm.split %qkv sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %qn = llm.weight "q_norm" : tensor<16xf32>
  // Per-head q norm: weight of head_dim elements.
  // CHECK: llm.rms_norm %[[Q]]#0, %{{.*}} {eps = 9.9999999999999995E-7 : f64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
  %qh = llm.rms_norm %q, %qn {eps = 1.0e-6 : f64} : (tensor<?x64xf32>, tensor<16xf32>) -> tensor<?x64xf32>
  // CHECK: llm.rope %{{.*}}, %{{.*}} {head_dim = 16 : i64, num_heads = 4 : i64, theta = 1.000000e+04 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %qr = llm.rope %qh, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64}
      : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  // Default-valued attributes (low_freq_factor = 1, high_freq_factor = 4) are elided.
  // CHECK: llm.rope %[[Q]]#1, %{{.*}} {factor = 8.000000e+00 : f64, head_dim = 16 : i64, num_heads = 2 : i64, original_max_position = 8192 : i64, rope_type = "llama3", style = "interleaved", theta = 5.000000e+05 : f64}
  %kr = llm.rope %k, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 500000.0 : f64,
                                 style = "interleaved", rope_type = "llama3", factor = 8.0 : f64,
                                 low_freq_factor = 1.0 : f64, high_freq_factor = 4.0 : f64,
                                 original_max_position = 8192 : i64}
      : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  // CHECK: %[[KV1:.*]] = llm.kv_store %{{.*}}, %[[Q]]#2, %{{.*}}, %{{.*}} {head_dim = 16 : i64, layer = 0 : i64, num_kv_heads = 2 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %kv1 = llm.kv_store %kr, %v, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  // CHECK: llm.kv_store {{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 1 : i64, layout = "block_head_slot_dim", num_kv_heads = 2 : i64}
  %kv2 = llm.kv_store %kr, %v, %kv1, %batch {layer = 1 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64,
                                             block_size = 16 : i64, kv_dtype = "f32", layout = "block_head_slot_dim"}
      : tensor<?x32xf32>, tensor<?x32xf32>
  // CHECK: llm.paged_attention %{{.*}}, %[[KV1]], %{{.*}} {head_dim = 16 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %attn = llm.paged_attention %qr, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                                 head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  // CHECK: llm.paged_attention {{.*}} {head_dim = 16 : i64, layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f64, sliding_window = 4096 : i64}
  %attn2 = llm.paged_attention %qr, %kv2, %batch {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                                  head_dim = 16 : i64, scale = 0.25 : f64, sliding_window = 4096 : i64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo = llm.weight "o" : tensor<64x64xf32>
  // CHECK: %[[O:.*]] = llm.linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %o = llm.linear %attn, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  // CHECK: %[[S:.*]] = llm.add %[[O]], %[[X]] : tensor<?x64xf32>
  %s = llm.add %o, %x : tensor<?x64xf32>
  %pln = llm.weight "post" : tensor<64xf32>
  // CHECK: %[[N:.*]], %[[SUM:.*]] = llm.add_rms_norm %{{.*}}, %[[S]], %{{.*}} {eps = 1.000000e-05 : f64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  %n, %s2 = llm.add_rms_norm %attn2, %s, %pln {eps = 1.0e-5 : f64}
      : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  %wg = llm.weight "gate" : tensor<128x64xf32>
  %wu = llm.weight "up" : tensor<128x64xf32>
  %g = llm.linear %n, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %u = llm.linear %n, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  // CHECK: llm.silu_mul %{{.*}}, %{{.*}} : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %a = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wgu = llm.weight_concat %wg, %wu : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
  %gu = llm.linear %n, %wgu : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
  // CHECK: llm.silu_mul %{{.*}} : (tensor<?x256xf32>) -> tensor<?x128xf32>
  %a2 = llm.silu_mul %gu : (tensor<?x256xf32>) -> tensor<?x128xf32>
  %wd = llm.weight "down" : tensor<64x128xf32>
  %d = llm.linear %a2, %wd : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  // CHECK: llm.add %{{.*}}, %[[SUM]] : tensor<?x64xf32>
  %d2 = llm.add %d, %s2 : tensor<?x64xf32>
  %lm = llm.weight "lm_head.weight" : tensor<256x64xf32>
  // CHECK: llm.logits %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  %logits = llm.logits %d2, %lm, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}

// CHECK-LABEL: func.func @rope_kv_store
func.func @rope_kv_store(%qkv: tensor<?x128xf32>, %positions: tensor<?xi32>, %batch: !llm.batch,
                         %kv: !llm.kv_cache) -> (tensor<?x64xf32>, !llm.kv_cache) {
  // CHECK: %[[Q:.*]], %[[KV:.*]] = llm.rope_kv_store %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {block_size = 16 : i64, head_dim = 16 : i64, kv_dtype = "f32", layer = 2 : i64, layout = "block_head_slot_dim", num_heads = 4 : i64, num_kv_heads = 2 : i64, style = "interleaved", theta = 1.000000e+04 : f64} : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %q, %kv1 = llm.rope_kv_store %qkv, %positions, %kv, %batch {layer = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                                               head_dim = 16 : i64, theta = 10000.0 : f64, style = "interleaved",
                                                               block_size = 16 : i64, kv_dtype = "f32", layout = "block_head_slot_dim"}
      : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x64xf32>
  // CHECK: return %[[Q]], %[[KV]]
  return %q, %kv1 : tensor<?x64xf32>, !llm.kv_cache
}
