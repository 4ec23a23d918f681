// RUN: llmc-opt %s -split-input-file --llm-fuse-qkv | FileCheck %s

// Two Llama layers as the frontend emits them (each weight right before its
// linear). q/k/v of each layer fuse; the weights of k and v are hoisted above
// the fused linear; gate/up (feeding silu_mul), o_proj and down_proj stay.

// CHECK-LABEL: func.func @forward
// CHECK:      %[[H0:.*]] = llm.rms_norm
// CHECK-NEXT: %[[WQ0:.*]] = llm.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
// CHECK-NEXT: %[[WK0:.*]] = llm.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
// CHECK-NEXT: %[[WV0:.*]] = llm.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
// CHECK-NEXT: %[[W0:.*]] = llm.weight_concat %[[WQ0]], %[[WK0]], %[[WV0]] : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
// CHECK-NEXT: %[[QKV0:.*]] = llm.linear %[[H0]], %[[W0]] : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
// CHECK-NEXT: %[[S0:.*]]:3 = llm.split %[[QKV0]] sizes [64, 32, 32] : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
// CHECK-NEXT: llm.rope %[[S0]]#0, %{{.*}} {head_dim = 16 : i64, num_heads = 4 : i64
// CHECK-NEXT: %[[KR0:.*]] = llm.rope %[[S0]]#1, %{{.*}} {head_dim = 16 : i64, num_heads = 2 : i64
// CHECK-NEXT: llm.kv_store %[[KR0]], %[[S0]]#2,
// CHECK-NEXT: llm.paged_attention
// CHECK-NEXT: llm.weight "model.layers.0.self_attn.o_proj.weight"
// CHECK-NEXT: llm.linear
// CHECK-NEXT: llm.add
// CHECK-NEXT: llm.weight "model.layers.0.post_attention_layernorm.weight"
// CHECK-NEXT: %[[H20:.*]] = llm.rms_norm
// CHECK-NEXT: llm.weight "model.layers.0.mlp.gate_proj.weight"
// CHECK-NEXT: %[[G0:.*]] = llm.linear %[[H20]], %{{.*}} : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
// CHECK-NEXT: llm.weight "model.layers.0.mlp.up_proj.weight"
// CHECK-NEXT: %[[U0:.*]] = llm.linear %[[H20]], %{{.*}} : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
// CHECK-NEXT: llm.silu_mul %[[G0]], %[[U0]]
// CHECK:      %[[H1:.*]] = llm.rms_norm
// CHECK-NEXT: llm.weight "model.layers.1.self_attn.q_proj.weight"
// CHECK-NEXT: llm.weight "model.layers.1.self_attn.k_proj.weight"
// CHECK-NEXT: llm.weight "model.layers.1.self_attn.v_proj.weight"
// CHECK-NEXT: %[[W1:.*]] = llm.weight_concat
// CHECK-NEXT: %[[QKV1:.*]] = llm.linear %[[H1]], %[[W1]]
// CHECK-NEXT: llm.split %[[QKV1]] sizes [64, 32, 32]
// CHECK-NOT:  llm.split
// CHECK:      llm.logits
func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  %emb = llm.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  %x0 = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %ln0 = llm.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
  %h0 = llm.rms_norm %x0, %ln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq0 = llm.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q0 = llm.linear %h0, %wq0 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wk0 = llm.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  %k0 = llm.linear %h0, %wk0 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wv0 = llm.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
  %v0 = llm.linear %h0, %wv0 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %qr0 = llm.rope %q0, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr0 = llm.rope %k0, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr0, %v0, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %attn0 = llm.paged_attention %qr0, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo0 = llm.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o0 = llm.linear %attn0, %wo0 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r0 = llm.add %x0, %o0 : tensor<?x64xf32>
  %pln0 = llm.weight "model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  %h2_0 = llm.rms_norm %r0, %pln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wgate0 = llm.weight "model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate0 = llm.linear %h2_0, %wgate0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wup0 = llm.weight "model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
  %up0 = llm.linear %h2_0, %wup0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %act0 = llm.silu_mul %gate0, %up0 : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wdown0 = llm.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  %down0 = llm.linear %act0, %wdown0 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %x1 = llm.add %r0, %down0 : tensor<?x64xf32>
  %ln1 = llm.weight "model.layers.1.input_layernorm.weight" : tensor<64xf32>
  %h1 = llm.rms_norm %x1, %ln1 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq1 = llm.weight "model.layers.1.self_attn.q_proj.weight" : tensor<64x64xf32>
  %q1 = llm.linear %h1, %wq1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wk1 = llm.weight "model.layers.1.self_attn.k_proj.weight" : tensor<32x64xf32>
  %k1 = llm.linear %h1, %wk1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wv1 = llm.weight "model.layers.1.self_attn.v_proj.weight" : tensor<32x64xf32>
  %v1 = llm.linear %h1, %wv1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %qr1 = llm.rope %q1, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr1 = llm.rope %k1, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv2 = llm.kv_store %kr1, %v1, %kv1, %batch {layer = 1 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %attn1 = llm.paged_attention %qr1, %kv2, %batch {layer = 1 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo1 = llm.weight "model.layers.1.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o1 = llm.linear %attn1, %wo1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r1 = llm.add %x1, %o1 : tensor<?x64xf32>
  %pln1 = llm.weight "model.layers.1.post_attention_layernorm.weight" : tensor<64xf32>
  %h2_1 = llm.rms_norm %r1, %pln1 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wgate1 = llm.weight "model.layers.1.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate1 = llm.linear %h2_1, %wgate1 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wup1 = llm.weight "model.layers.1.mlp.up_proj.weight" : tensor<128x64xf32>
  %up1 = llm.linear %h2_1, %wup1 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %act1 = llm.silu_mul %gate1, %up1 : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wdown1 = llm.weight "model.layers.1.mlp.down_proj.weight" : tensor<64x128xf32>
  %down1 = llm.linear %act1, %wdown1 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %x2 = llm.add %r1, %down1 : tensor<?x64xf32>
  %norm = llm.weight "model.norm.weight" : tensor<64xf32>
  %final = llm.rms_norm %x2, %norm {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %lm = llm.weight "lm_head.weight" : tensor<256x64xf32>
  %logits = llm.logits %final, %lm, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}

// -----

// Qwen2-style projections with biases: the biases are concatenated too.
// CHECK-LABEL: func.func @qwen
// CHECK:      %[[W:.*]] = llm.weight_concat %{{.*}}, %{{.*}}, %{{.*}} : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
// CHECK-NEXT: %[[B:.*]] = llm.weight_concat %{{.*}}, %{{.*}}, %{{.*}} : (tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<128xf32>
// CHECK-NEXT: %[[Y:.*]] = llm.linear %{{.*}}, %[[W]], %[[B]] : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
// CHECK-NEXT: llm.split %[[Y]] sizes [64, 32, 32]
func.func @qwen(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  %emb = llm.weight "model.embed_tokens.weight" : tensor<256x64xf32>
  %x0 = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %ln0 = llm.weight "model.layers.0.input_layernorm.weight" : tensor<64xf32>
  %h0 = llm.rms_norm %x0, %ln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq0 = llm.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
  %bq0 = llm.weight "model.layers.0.self_attn.q_proj.bias" : tensor<64xf32>
  %q0 = llm.linear %h0, %wq0, %bq0 : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wk0 = llm.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xf32>
  %bk0 = llm.weight "model.layers.0.self_attn.k_proj.bias" : tensor<32xf32>
  %k0 = llm.linear %h0, %wk0, %bk0 : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %wv0 = llm.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xf32>
  %bv0 = llm.weight "model.layers.0.self_attn.v_proj.bias" : tensor<32xf32>
  %v0 = llm.linear %h0, %wv0, %bv0 : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %qr0 = llm.rope %q0, %positions {num_heads = 4 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr0 = llm.rope %k0, %positions {num_heads = 2 : i64, head_dim = 16 : i64, theta = 10000.0 : f64} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %kr0, %v0, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %attn0 = llm.paged_attention %qr0, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wo0 = llm.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xf32>
  %o0 = llm.linear %attn0, %wo0 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %r0 = llm.add %x0, %o0 : tensor<?x64xf32>
  %pln0 = llm.weight "model.layers.0.post_attention_layernorm.weight" : tensor<64xf32>
  %h2_0 = llm.rms_norm %r0, %pln0 {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wgate0 = llm.weight "model.layers.0.mlp.gate_proj.weight" : tensor<128x64xf32>
  %gate0 = llm.linear %h2_0, %wgate0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wup0 = llm.weight "model.layers.0.mlp.up_proj.weight" : tensor<128x64xf32>
  %up0 = llm.linear %h2_0, %wup0 : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %act0 = llm.silu_mul %gate0, %up0 : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wdown0 = llm.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xf32>
  %down0 = llm.linear %act0, %wdown0 : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %x1 = llm.add %r0, %down0 : tensor<?x64xf32>
  %norm = llm.weight "model.norm.weight" : tensor<64xf32>
  %final = llm.rms_norm %x1, %norm {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %lm = llm.weight "lm_head.weight" : tensor<256x64xf32>
  %logits = llm.logits %final, %lm, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}

// -----

// Mixed bias / no bias on the same input: not fused.
// CHECK-LABEL: func.func @mixed_bias
// CHECK-NOT: llm.weight_concat
// CHECK-NOT: llm.split
// CHECK-COUNT-2: llm.linear
func.func @mixed_bias(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>) {
  %wq = llm.weight "q" : tensor<64x64xf32>
  %bq = llm.weight "qb" : tensor<64xf32>
  %q = llm.linear %x, %wq, %bq : (tensor<?x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wk = llm.weight "k" : tensor<32x64xf32>
  %k = llm.linear %x, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  return %q, %k : tensor<?x64xf32>, tensor<?x32xf32>
}

// -----

// Different inputs, a single linear per input, and a weight that is a function
// argument (not an llm.weight): nothing to fuse.
// CHECK-LABEL: func.func @no_group
// CHECK-NOT: llm.weight_concat
// CHECK-NOT: llm.split
// CHECK-COUNT-4: llm.linear
func.func @no_group(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %warg: tensor<32x64xf32>)
    -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x64xf32>) {
  %wa = llm.weight "a" : tensor<64x64xf32>
  %a = llm.linear %x, %wa : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %b = llm.linear %x, %warg : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wc = llm.weight "c" : tensor<32x64xf32>
  %c = llm.linear %y, %wc : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wd = llm.weight "d" : tensor<64x64xf32>
  %d = llm.linear %a, %wd : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  return %a, %b, %c, %d : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x64xf32>
}

// -----

// A linear whose result feeds silu_mul is left to --llm-fuse-gate-up; the
// other two on the same input still fuse.
// CHECK-LABEL: func.func @skip_silu_mul
// CHECK: %[[W:.*]] = llm.weight_concat %{{.*}}, %{{.*}} : (tensor<64x64xf32>, tensor<32x64xf32>) -> tensor<96x64xf32>
// CHECK: %[[S:.*]]:2 = llm.split %{{.*}} sizes [64, 32]
// CHECK: %[[G:.*]] = llm.linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
// CHECK: llm.silu_mul %[[G]], %[[G]]
// CHECK: return %[[S]]#0, %[[S]]#1
func.func @skip_silu_mul(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x128xf32>) {
  %wa = llm.weight "a" : tensor<64x64xf32>
  %a = llm.linear %x, %wa : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wb = llm.weight "b" : tensor<32x64xf32>
  %b = llm.linear %x, %wb : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wg = llm.weight "g" : tensor<128x64xf32>
  %g = llm.linear %x, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %s = llm.silu_mul %g, %g : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  return %a, %b, %s : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x128xf32>
}
