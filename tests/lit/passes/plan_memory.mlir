// RUN: llmc-opt %s -split-input-file --llm-plan-memory | FileCheck %s
// The whole pipeline on two Llama layers, checked by an independent liveness
// checker (no two values live at once overlap; the arena covers every slot):
// RUN: llmc-opt %s -split-input-file --llm-fuse-qkv --llm-fuse-gate-up --llm-fuse-add-rmsnorm --llm-kv-cache-layout --llm-plan-memory -o %t.fused.mlir
// RUN: %python %S/../Inputs/check_plan.py @forward < %t.fused.mlir | FileCheck %s --check-prefix=PLAN
// RUN: llmc-opt %s -split-input-file --llm-plan-memory | %python %S/../Inputs/check_plan.py @forward | FileCheck %s --check-prefix=PLAN-UNFUSED
// (Fused: the gate|up linear's input lives until its silu_mul, which the GPU's decode GEMV may do
// while it reads that input, plan Step.silu_kernel: 2560 bytes rather than 2048.)
// PLAN: PLAN OK 33 values 2560 bytes
// PLAN-UNFUSED: PLAN OK 33 values 2048 bytes

// Hand-computed best fit (bytes per row: [?,64] -> 256, [?,32] -> 128, [?,16] -> 64).
//   b: fresh @0; c: fresh @256; d: b still live at d -> fresh @320, then b frees [0,256)
//   e: best fit in [0,256) -> @0; d frees -> free {[64,256), [320,448)}
//   f: best fit 64 B -> [320,448) is the smaller block -> @320; c, e free -> {[0,320), [384,448)}
//   g: 256 B -> @0. Arena high-water mark 448.
// CHECK-LABEL: func.func @best_fit
// CHECK-SAME: attributes {llm.arena_bytes_per_token = 448 : i64}
// CHECK: llm.linear {{.*}}llm.arena_offsets = [0]{{.*}} -> tensor<?x64xf32>
// CHECK: llm.linear {{.*}}llm.arena_offsets = [256]{{.*}} -> tensor<?x16xf32>
// CHECK: llm.linear {{.*}}llm.arena_offsets = [320]{{.*}} -> tensor<?x32xf32>
// CHECK: llm.linear {{.*}}llm.arena_offsets = [0]{{.*}} -> tensor<?x16xf32>
// CHECK: llm.add {{.*}}llm.arena_offsets = [320]{{.*}} : tensor<?x16xf32>
// CHECK: llm.linear {{.*}}llm.arena_offsets = [0]{{.*}} -> tensor<?x64xf32>
func.func @best_fit(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %wb = llm.weight "b" : tensor<64x64xf32>
  %b = llm.linear %x, %wb : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wc = llm.weight "c" : tensor<16x64xf32>
  %c = llm.linear %x, %wc : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
  %wd = llm.weight "d" : tensor<32x64xf32>
  %d = llm.linear %b, %wd : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %we = llm.weight "e" : tensor<16x32xf32>
  %e = llm.linear %d, %we : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %f = llm.add %c, %e : tensor<?x16xf32>
  %wg = llm.weight "g" : tensor<64x16xf32>
  %g = llm.linear %f, %wg : (tensor<?x16xf32>, tensor<64x16xf32>) -> tensor<?x64xf32>
  return %g : tensor<?x64xf32>
}

// -----

// A returned value lives to the end (%a keeps @0); an op's outputs never reuse
// its inputs' space even when those inputs die at the op (%c is not placed in
// %b's slot); row sizes round up to 64 bytes (10, 1, 20, 33 floats -> 64, 64,
// 128, 192 bytes); unused results die right after their op; growing the arena
// extends a free block that touches its end (%sum: [768,960) + 64 bytes).
// CHECK-LABEL: func.func @liveness
// CHECK-SAME: attributes {llm.arena_bytes_per_token = 1024 : i64}
// CHECK: %[[A:.*]] = llm.rms_norm {{.*}}llm.arena_offsets = [0]
// CHECK: %[[B:.*]] = llm.rms_norm {{.*}}llm.arena_offsets = [256]
// CHECK: llm.rms_norm %[[B]], {{.*}}llm.arena_offsets = [512]
// CHECK: llm.split {{.*}}llm.arena_offsets = [256, 320, 384, 768]{{.*}} -> tensor<?x10xf32>, tensor<?x1xf32>, tensor<?x20xf32>, tensor<?x33xf32>
// CHECK: llm.add_rms_norm {{.*}}llm.arena_offsets = [256, 768]
func.func @liveness(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %w = llm.weight "w" : tensor<64xf32>
  %a = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %b = llm.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %c = llm.rms_norm %b, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  // No piece is used: all die right after the split.
  %s:4 = llm.split %c sizes [10, 1, 20, 33] : tensor<?x64xf32> -> tensor<?x10xf32>, tensor<?x1xf32>, tensor<?x20xf32>, tensor<?x33xf32>
  %n, %sum = llm.add_rms_norm %c, %c, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return %a, %n : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

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
