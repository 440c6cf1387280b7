"""The Hugging Face world: transformers export and import (hf), the safetensors release form (release),
the lm-evaluation-harness backend (lm_eval)."""
