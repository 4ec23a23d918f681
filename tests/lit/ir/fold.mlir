// RUN: llmc-opt %s -canonicalize -split-input-file | FileCheck %s

// A split into a single piece is its input.
// CHECK-LABEL: func.func @split_one
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xf32>, %[[W:.*]]: tensor<64xf32>)
// CHECK-NOT: llm.split
// CHECK: %[[N:.*]] = llm.rms_norm %[[X]], %[[W]]
// CHECK: return %[[N]]
func.func @split_one(%x: tensor<?x64xf32>, %w: tensor<64xf32>) -> tensor<?x64xf32> {
  %a = llm.split %x sizes [64] : tensor<?x64xf32> -> tensor<?x64xf32>
  %n = llm.rms_norm %a, %w {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return %n : tensor<?x64xf32>
}

// -----

// A real split stays.
// CHECK-LABEL: func.func @split_two
// CHECK: %[[S:.*]]:2 = llm.split %{{.*}} sizes [32, 32]
// CHECK: return %[[S]]#0, %[[S]]#1
func.func @split_two(%x: tensor<?x64xf32>) -> (tensor<?x32xf32>, tensor<?x32xf32>) {
  %a, %b = llm.split %x sizes [32, 32] : tensor<?x64xf32> -> tensor<?x32xf32>, tensor<?x32xf32>
  return %a, %b : tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// One piece, but the result type differs (static rows -> dynamic): no fold.
// CHECK-LABEL: func.func @split_one_type_change
// CHECK: %[[S:.*]] = llm.split %{{.*}} sizes [64] : tensor<4x64xf32> -> tensor<?x64xf32>
// CHECK: return %[[S]]
func.func @split_one_type_change(%x: tensor<4x64xf32>) -> tensor<?x64xf32> {
  %a = llm.split %x sizes [64] : tensor<4x64xf32> -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

// Unused pure ops disappear; the cache chain that feeds the result stays.
// CHECK-LABEL: func.func @dead_ops
// CHECK-NOT: llm.weight "unused"
// CHECK: llm.kv_store
// CHECK: llm.paged_attention
func.func @dead_ops(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %kv: !llm.kv_cache,
                    %b: !llm.batch) -> tensor<?x64xf32> {
  %unused = llm.weight "unused" : tensor<4x4xf32>
  %kv1 = llm.kv_store %k, %k, %kv, %b {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64}
      : tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.paged_attention %q, %kv1, %b {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
                                         head_dim = 16 : i64, scale = 0.25 : f64}
      : tensor<?x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
