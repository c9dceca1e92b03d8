"""The text the factory's small tokenizers are trained on."""

CORPUS = """\
The quick brown fox jumps over the lazy dog. A sentence embedding maps text to a vector.
Ternary weights take the values minus one, zero and plus one; activations are eight-bit integers.
BitNet models replace every linear layer with a BitLinear layer that normalizes its input first.
Search queries and documents are embedded into the same space and compared by cosine similarity.
Onnxruntime runs the exported graph on the CPU with a custom operator for the ternary matmul.
What is the capital of France? Paris is the capital and largest city of France.
How many legs does a spider have? Spiders have eight legs and most have eight eyes.
The weather today is sunny with a light breeze from the west, 21 degrees at noon.
Numbers like 3.14159, 2026, 42 and 1e-6 appear in technical text, as do names like Qwen3 and Gemma3.
def embed(texts): return model.encode(texts, normalize_embeddings=True)  # Python code
Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?
Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München!
El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación?
敏捷的棕色狐狸跳过了懒狗。 今日はいい天気ですね。 빠른 갈색 여우가 게으른 개를 뛰어넘는다.
Emoji and symbols: 🙂 🚀 ✓ → € £ ¥ — “quotes” and ‘apostrophes’ don't break tokenizers.
Retrieval, reranking, clustering and classification are common uses of text embeddings.
Tabs\tand  double  spaces,\nnew lines and trailing spaces   are part of real inputs.
"""


def training_lines() -> list[str]:
    """CORPUS's lines, four times over: what the tokenizer trainers are fed."""
    return [line for line in CORPUS.splitlines() if line] * 4
