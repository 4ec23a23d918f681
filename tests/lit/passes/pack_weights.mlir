// RUN: llmc-opt %s -split-input-file --llm-pack-weights | FileCheck %s
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='quantize=int4-g128-f16-min' | FileCheck %s --check-prefix=RTN
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='quantize=int8-g32-f16-sym quantize-embeddings=false' | FileCheck %s --check-prefix=NOEMB
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='dequantize=true' | FileCheck %s --check-prefix=DEQ
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='dequantize=true quantize=int8-g32-f16-sym' | FileCheck %s --check-prefix=REQ
// RUN: llmc-opt %s -split-input-file --llm-pack-weights --llm-fuse-qkv --llm-fuse-gate-up | FileCheck %s --check-prefix=FUSE
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='layout=row-groups' | FileCheck %s --check-prefix=ROWS
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='target=cuda' | FileCheck %s --check-prefix=CUDA
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='target=cuda layout=cuda-mma' | FileCheck %s --check-prefix=CUDA
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='dense-dtype=bf16' --llm-fuse-gate-up | FileCheck %s --check-prefix=BF16
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='dense-dtype=f16 dequantize=true' | FileCheck %s --check-prefix=F16
// RUN: not llmc-opt %s -split-input-file --llm-pack-weights='dense-dtype=f64' 2>&1 | FileCheck %s --check-prefix=DENSE
// RUN: not llmc-opt %s -split-input-file --llm-pack-weights='layout=columns' 2>&1 | FileCheck %s --check-prefix=LAYOUT
// RUN: not llmc-opt %s -split-input-file --llm-pack-weights='target=cuda layout=interleaved8' 2>&1 | FileCheck %s --check-prefix=MISMATCH
// RUN: not llmc-opt %s -split-input-file --llm-pack-weights='target=tpu' 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not llmc-opt %s -split-input-file --llm-pack-weights='quantize=int5' 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='quantize=int4-g256s32-f16-min' | FileCheck %s --check-prefix=SUBRTN
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='target=cuda quantize=int4-g256s32-f16-min' | FileCheck %s --check-prefix=SUBRTN
// RUN: llmc-opt %s -split-input-file --llm-pack-weights='target=cuda quantize=int5-g32-f16-sym' | FileCheck %s --check-prefix=INT5

// Checkpoint formats (source_quant) are kept; float matrices stay f32 without quantize; a norm
// weight never gets a format. Embedding and logits matrices are candidates like linears.
// CHECK: module attributes {llm.weight_layout = "cpu_interleaved8"}
// ROWS: module attributes {llm.weight_layout = "cpu_row_groups"}
// CUDA: module attributes {llm.weight_layout = "cuda_mma_n8"}
// CUDA: llm.weight "wq" {quant = "int4-g32-f16-min", source_quant = "int4-g32-f16-min"}
// LAYOUT: unknown layout 'columns' for target cpu (supported: interleaved8, row-groups for cpu; cuda-mma for cuda)
// MISMATCH: unknown layout 'interleaved8' for target cuda
// CHECK: llm.weight "emb" {quant = "int8-g32-f16-sym", source_quant = "int8-g32-f16-sym"}
// CHECK: llm.weight "norm" : tensor<64xf32>
// CHECK: llm.weight "wq" {quant = "int4-g32-f16-min", source_quant = "int4-g32-f16-min"}
// CHECK: llm.weight "wk" {quant = "int4-g32-f16-min", source_quant = "int4-g32-f16-min"}
// CHECK: llm.weight "wv" {quant = "int8-g32-f16-sym", source_quant = "int8-g32-f16-sym"}
// CHECK: llm.weight "wg" : tensor<128x64xf32>
// CHECK: llm.weight "wu" : tensor<128x64xf32>
// CHECK: llm.weight "wd" : tensor<64x128xf32>

// With quantize the float matrices get the format; rows of 64 cannot hold groups of 128: g64.
// RTN: llm.weight "emb" {quant = "int8-g32-f16-sym", source_quant = "int8-g32-f16-sym"}
// RTN: llm.weight "norm" : tensor<64xf32>
// RTN: llm.weight "wg" {quant = "int4-g64-f16-min"}
// RTN: llm.weight "wu" {quant = "int4-g64-f16-min"}
// RTN: llm.weight "wd" {quant = "int4-g128-f16-min"}

// NOEMB: llm.weight "wg" {quant = "int8-g32-f16-sym"}
// NOEMB: llm.weight "head" : tensor<256x64xf32>

// DEQ-NOT: {{[{ ]}}quant =
// DEQ: llm.weight "emb" {source_quant = "int8-g32-f16-sym"} : tensor<256x64xf32>

// REQ: llm.weight "emb" {quant = "int8-g32-f16-sym", source_quant = "int8-g32-f16-sym"}
// REQ: llm.weight "wq" {quant = "int8-g32-f16-sym", source_quant = "int4-g32-f16-min"}
// REQ: llm.weight "head" {quant = "int8-g32-f16-sym"}

// Fusion concatenates only weights of one format: q and k (Q4_1) fuse, v (Q8_0) stays apart;
// gate and up (both f32) fuse.
// FUSE: llm.weight_concat %{{.*}}, %{{.*}} {quant = "int4-g32-f16-min"} : (tensor<64x64xf32>, tensor<32x64xf32>) -> tensor<96x64xf32>
// FUSE: llm.split {{.*}} sizes [64, 32]
// FUSE: llm.linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
// FUSE: llm.weight_concat %{{.*}}, %{{.*}} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>

// dense-dtype: matrices that get no format are stored in 2-byte floats (quant = "bf16" / "f16");
// checkpoint formats are kept, norms stay f32, and equal dense storages still fuse.
// BF16: llm.weight "emb" {quant = "int8-g32-f16-sym", source_quant = "int8-g32-f16-sym"}
// BF16: llm.weight "norm" : tensor<64xf32>
// BF16: llm.weight "wg" {quant = "bf16"} : tensor<128x64xf32>
// BF16: llm.weight "wu" {quant = "bf16"} : tensor<128x64xf32>
// BF16: llm.weight_concat %{{.*}}, %{{.*}} {quant = "bf16"} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
// BF16: llm.weight "wd" {quant = "bf16"} : tensor<64x128xf32>
// BF16: llm.weight "head" {quant = "bf16"} : tensor<256x64xf32>
// F16: llm.weight "emb" {quant = "f16", source_quant = "int8-g32-f16-sym"}
// F16: llm.weight "norm" : tensor<64xf32>
// F16: llm.weight "wq" {quant = "f16", source_quant = "int4-g32-f16-min"}
// DENSE: unknown dense-dtype 'f64' (supported: f32, f16, bf16)

// TARGET: unknown target 'tpu' (supported: cpu, cuda)
// FORMAT: quantization format 'int5'

// Sub-scales: groups that divide the rows, in steps of the sub-block (rows of 64: g64s32), for
// either target; int5 codes too.
// SUBRTN: llm.weight "wg" {quant = "int4-g64s32-f16-min"}
// SUBRTN: llm.weight "wd" {quant = "int4-g128s32-f16-min"}
// INT5: llm.weight "wg" {quant = "int5-g32-f16-sym"}

func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  %emb = llm.weight "emb" {source_quant = "int8-g32-f16-sym"} : tensor<256x64xf32>
  %x0 = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x64xf32>) -> tensor<?x64xf32>
  %ln = llm.weight "norm" : tensor<64xf32>
  %h = llm.rms_norm %x0, %ln {eps = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq = llm.weight "wq" {source_quant = "int4-g32-f16-min"} : tensor<64x64xf32>
  %q = llm.linear %h, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %wk = llm.weight "wk" {source_quant = "int4-g32-f16-min"} : tensor<32x64xf32>
  %k = llm.linear %h, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %wv = llm.weight "wv" {source_quant = "int8-g32-f16-sym"} : tensor<32x64xf32>
  %v = llm.linear %h, %wv : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %kv1 = llm.kv_store %k, %v, %kv, %batch {layer = 0 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x32xf32>
  %a = llm.paged_attention %q, %kv1, %batch {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %wg = llm.weight "wg" : tensor<128x64xf32>
  %g = llm.linear %a, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %wu = llm.weight "wu" : tensor<128x64xf32>
  %u = llm.linear %a, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %s = llm.silu_mul %g, %u : (tensor<?x128xf32>, tensor<?x128xf32>) -> tensor<?x128xf32>
  %wd = llm.weight "wd" : tensor<64x128xf32>
  %d = llm.linear %s, %wd : (tensor<?x128xf32>, tensor<64x128xf32>) -> tensor<?x64xf32>
  %head = llm.weight "head" : tensor<256x64xf32>
  %logits = llm.logits %d, %head, %batch : (tensor<?x64xf32>, tensor<256x64xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}

// -----

// GGUF k-quant blocks (Q4_K, Q6_K) held with sub-scales and Q5_0 as int5: kept for either target
// (the CPU and the CUDA kernels read them).
// CHECK: llm.weight "q4k" {quant = "int4-g256s32-f16-min", source_quant = "int4-g256s32-f16-min"}
// CHECK: llm.weight "q5" {quant = "int5-g32-f16-sym", source_quant = "int5-g32-f16-sym"}
// CHECK: llm.weight "q6k" {quant = "int8-g256s16-f16-sym", source_quant = "int8-g256s16-f16-sym"}
// CUDA: llm.weight "q4k" {quant = "int4-g256s32-f16-min", source_quant = "int4-g256s32-f16-min"}
// CUDA: llm.weight "q5" {quant = "int5-g32-f16-sym", source_quant = "int5-g32-f16-sym"}
// CUDA: llm.weight "q6k" {quant = "int8-g256s16-f16-sym", source_quant = "int8-g256s16-f16-sym"}

func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>,
    %batch: !llm.batch, %kv: !llm.kv_cache) -> tensor<?x256xf32> {
  %emb = llm.weight "emb2" : tensor<256x512xf32>
  %x = llm.embedding %tokens, %emb : (tensor<?xi32>, tensor<256x512xf32>) -> tensor<?x512xf32>
  %w = llm.weight "q4k" {source_quant = "int4-g256s32-f16-min"} : tensor<512x512xf32>
  %y0 = llm.linear %x, %w : (tensor<?x512xf32>, tensor<512x512xf32>) -> tensor<?x512xf32>
  %w5 = llm.weight "q5" {source_quant = "int5-g32-f16-sym"} : tensor<512x512xf32>
  %y = llm.linear %y0, %w5 : (tensor<?x512xf32>, tensor<512x512xf32>) -> tensor<?x512xf32>
  %head = llm.weight "q6k" {source_quant = "int8-g256s16-f16-sym"} : tensor<256x512xf32>
  %logits = llm.logits %y, %head, %batch : (tensor<?x512xf32>, tensor<256x512xf32>, !llm.batch) -> tensor<?x256xf32>
  return %logits : tensor<?x256xf32>
}
