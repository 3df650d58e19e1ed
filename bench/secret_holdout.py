"""A held-out labelled set for the secret guard, drawn fresh at benchmark time (fixed seed).

The fixture set in tests/fixtures/secrets/ is the one our rule layer was written against. This one
uses the same vendor-documented token shapes (`scripts/gen_secret_fixtures.py`'s TOKENS) with
fresh values from another seed, set in placings the fixtures do not use (TOML, keyword arguments,
Markdown tables, log lines, Dockerfiles, URL queries, YAML lists, shell quoting), plus context
families and negatives written in new forms: hashes and UUIDs in new places, subresource integrity
digests, base64 of ordinary text, placeholders, and lines of ordinary code from the standard library.
"""

from __future__ import annotations

import base64
import hashlib
import random
import string
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import gen_secret_fixtures as shapes  # noqa: E402

SEED = 31337
ALNUM = string.ascii_letters + string.digits
PLACINGS = [
    '{n_lower} = "{t}"',
    'client = Client(api_key="{t}", timeout=30)',
    "| prod | {n} | {t} |",
    "2026-12-01T10:00:00Z INFO upload: using credential {t} for bucket assets",
    "ENV {n}={t}",
    "https://api.internal/v1/items?access_token={t}&page=2",
    "{n_lower}:\n  - {t}",
    "docker login -u ci -p '{t}' registry.lan",
    "(rotated the old one, new value {t})",
    "settings.{n_lower} = os.environ.get('{n}', '{t}')",
]


def positives(rng: random.Random) -> list[dict[str, str]]:
    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    rows = []
    for family, makers in shapes.TOKENS.items():
        name = shapes.NAMES[family]
        for placing in PLACINGS:
            text = placing.format(t=rng.choice(makers)(), n=name, n_lower=name.lower())
            rows.append({"family": family, "text": text})
    for kind in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY", "PGP PRIVATE KEY BLOCK"):
        block = f"-----BEGIN {kind}-----\n{shapes.pem_body()}\n-----END {kind}-----"
        rows.append({"family": "private_key", "text": f"```\n{block}\n```"})
        rows.append({"family": "private_key", "text": f'KEY = """{block}"""'})
        rows.append({"family": "private_key", "text": block.replace("\n", "\r\n")})
    for _ in range(4):
        secret, key_id = pick(ALNUM + "+/", 40), "AKIA" + pick(shapes.AWS_ID, 16)
        rows.append(
            {
                "family": "aws_secret_key",
                "text": f"[default]\naws_access_key_id={key_id}\naws_secret_access_key={secret}",
            }
        )
        rows.append({"family": "aws_secret_key", "text": f'{{"aws_secret_access_key": "{secret}"}}'})
        opaque = pick(ALNUM + "-._", 32)
        rows.append(
            {"family": "authorization", "text": f'requests.get(url, headers={{"Authorization": "Bearer {opaque}"}})'}
        )
        rows.append({"family": "authorization", "text": f"Authorization: token {pick(ALNUM, 40)}"})
        password = pick(ALNUM, 10) + "%237"  # a `#` percent-encoded, as a URL needs it
        rows.append({"family": "credential_url", "text": f"redis://:{password}@cache.internal:6379/0"})
        rows.append(
            {"family": "credential_url", "text": f"MONGO_URL=mongodb://admin:{password}@db.lan/?authSource=admin"}
        )
    return rows


def negatives(rng: random.Random) -> list[dict[str, str]]:
    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    rows = []
    for _ in range(20):
        data = pick(ALNUM, 24).encode()
        digest = base64.b64encode(hashlib.sha384(data).digest()).decode()
        rows.append({"family": "hash", "text": f"commit {hashlib.sha1(data).hexdigest()} (HEAD -> main)"})
        rows.append({"family": "hash", "text": f'ETag: "{hashlib.md5(data).hexdigest()}"'})
        rows.append({"family": "hash", "text": f"checksum = sha256:{hashlib.sha256(data).hexdigest()}"})
        rows.append({"family": "hash", "text": f'<script src="app.js" integrity="sha384-{digest}"></script>'})
        rows.append({"family": "uuid", "text": f"GET /v1/records/{uuid.UUID(int=rng.getrandbits(128), version=4)}"})
    words = "notes about the release the index was rebuilt and the tests passed on main".split()
    for _ in range(20):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(5, 15)))
        rows.append({"family": "base64", "text": f"payload: {base64.b64encode(sentence.encode()).decode()}"})
    for text in ("GITHUB_TOKEN=<paste here>", "sk_live_XXXXXXXXXXXXXXXXXXXXXXXX", "api_key: ${API_KEY}"):
        rows.append({"family": "placeholder", "text": text})
    import argparse

    lines = [line.strip() for line in Path(argparse.__file__).read_text(encoding="utf-8").splitlines()]
    code = [line for line in lines if len(line) > 30][:200]
    rows.extend({"family": "code", "text": line} for line in code)
    return rows


def labelled() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(positives, negatives), the same on every run."""
    shapes.rng = random.Random(SEED)  # the shapes' own generator, drawing fresh values
    rng = random.Random(SEED + 1)
    return positives(rng), negatives(rng)
