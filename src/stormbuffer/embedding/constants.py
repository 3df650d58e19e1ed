"""Identity of the embedding model and the ONNX variants that can be built from it."""

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSION = 384
MAX_TOKENS = 256

# fp32: the plain float32 graph (90 MB).
# wq8: weights stored as int8 (one scale per 32 input rows and output column; the word table per row),
#      dequantised once at session load and computed in float32 (25 MB).
# int8: onnxruntime dynamic quantisation, per-channel int8 matrix products (23 MB, faster, lossy).
VARIANTS = ("fp32", "wq8", "int8")

# From bench/embedding_variants.py (results/embedding_variants.json): wq8 stays within cosine 0.9995 of
# fp32 (mean 0.99986, one-word queries included), loads and runs as fast as fp32, keeps every top-1 on
# near-duplicate texts, at a quarter of the size. int8 is ~1.5x faster but falls to cosine 0.96 on a
# one-word query and reorders near-duplicates (top-10 overlap 0.94, top-1 kept 95%).
DEFAULT_VARIANT = "wq8"
