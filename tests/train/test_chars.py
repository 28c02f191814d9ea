#!/usr/bin/python3
"""The character-level transformer example end to end (examples/chars/train.py),
small: a one-block causal transformer (embedding, transformer_block,
layer_norm, linear; tensord.nn layers) trained on the first 6000 characters of
/usr/share/common-licenses/GPL-3 on a tensord of its own (--spawn $TENSORD_BIN).

Checks against references computed here, not by the example:
- the loss over the text (model.evaluate) after training is below the
  text's unigram entropy (NumPy, from the same characters) by 0.1 nats: the
  model uses its context;
- the loss before training is near log(V) (a fresh model guesses uniformly);
- the sampled text has exactly the requested length and only characters of
  the text's vocabulary, for two samples drawn at once.
Exits 77 (meson: skipped) only when the text is missing (not Debian)."""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "chars", "train.py")
TEXT = "/usr/share/common-licenses/GPL-3"
CHARS, GENERATE = 6000, 80


def entropy(text):
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(n / len(text) * math.log(n / len(text)) for n in counts.values())


def main():
    binary = os.environ.get("TENSORD_BIN")
    if not binary:
        print("TENSORD_BIN is not set")
        return 1
    if not os.path.exists(TEXT):
        print("SKIP: %s is missing" % TEXT)
        return 77
    with open(TEXT, encoding="utf-8", errors="replace") as f:
        text = f.read()[:CHARS]
    h = entropy(text)
    vocab = set(text)
    run = subprocess.run([sys.executable, EXAMPLE, "--spawn", binary, "--chars", str(CHARS), "--context", "16",
                          "--dim", "32", "--heads", "2", "--layers", "1", "--batch", "16", "--steps", "100",
                          "--lr", "1e-2", "--generate", str(GENERATE), "--samples", "2"],
                         capture_output=True, text=True, timeout=240)
    sys.stdout.write(run.stdout)
    sys.stdout.write(run.stderr)
    if run.returncode != 0:
        print("FAIL: train.py exited with %d" % run.returncode)
        return 1
    s = json.loads(run.stdout.strip().splitlines()[-1])
    fails = []
    if s["vocab"] != len(vocab) or set(s["vocabulary"]) != vocab:
        fails.append("vocabulary %r, want the %d characters of the text" % (s["vocabulary"], len(vocab)))
    if abs(s["unigram_entropy"] - h) > 1e-3:
        fails.append("the example's unigram entropy %.4f, here %.4f" % (s["unigram_entropy"], h))
    if not s["eval_loss"] < h - 0.1:
        fails.append("loss over the text %.4f is not below the unigram entropy %.4f - 0.1" % (s["eval_loss"], h))
    if abs(s["initial_loss"] - math.log(len(vocab))) > 1.0:
        fails.append("the loss before training %.4f is not near log(V) = %.3f" % (s["initial_loss"],
                                                                                 math.log(len(vocab))))
    gen = s["generated"]
    if not isinstance(gen, list) or len(gen) != 2:
        fails.append("want two samples, got %r" % (gen,))
    else:
        for g in gen:
            if len(g) != GENERATE or not set(g) <= vocab:
                fails.append("sample %r: length %d (want %d), characters outside the vocabulary: %r"
                             % (g, len(g), GENERATE, set(g) - vocab))
    for f in fails:
        print("FAIL:", f)
    if not fails:
        print("ok: loss %.4f < unigram entropy %.4f; %d-character samples from the vocabulary; %.1f ms/step"
              % (s["eval_loss"], h, GENERATE, s["step_ms"]))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
