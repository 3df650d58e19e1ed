"""Write the labelled secret set: tests/fixtures/secrets/{positives,negatives}.jsonl.

Every positive is a synthetic token of the shape its vendor documents (prefix, alphabet, length),
drawn from a seeded generator and set in the places agents paste them: a bare line, an environment
assignment, JSON, XML, YAML, a shell command, a sentence, and a JSON string where a literal `\\n`
is glued to the token. No value is a real credential. Negatives are what the guard must accept:
placeholders, documentation examples, hashes, UUIDs, base64 of ordinary text, code and Markdown.

    .venv/bin/python scripts/gen_secret_fixtures.py
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "secrets"
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
AWS_ID = string.ascii_uppercase + "234567"
rng = random.Random(20261201)


def pick(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def digits(n: int) -> str:
    return str(rng.randint(1, 9)) + pick(string.digits, n - 1)


# ---- token shapes, one generator per documented kind ----------------------------------------------

TOKENS: dict[str, list[Callable[[], str]]] = {
    "github": [
        *(lambda p=p: p + pick(ALNUM, 36) for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        lambda: "github_pat_" + pick(ALNUM, 22) + "_" + pick(ALNUM, 59),
    ],
    "gitlab": [
        *(
            lambda p=p: p + pick(B64URL, 20)
            for p in ("glpat-", "glrt-", "gloas-", "glcbt-", "glimt-", "glagent-", "glsoat-", "glft-", "gldt-")
        ),
        lambda: "glptt-" + pick(HEX, 40),
        lambda: "glffct-" + pick(B64URL, 20),
        lambda: "GR1348941" + pick(B64URL, 20),
        lambda: "glpat-" + pick(B64URL, 27) + ".01." + pick(string.ascii_lowercase + string.digits, 9),
        lambda: "glrt-t1_" + pick(B64URL, 27) + ".01." + pick(string.ascii_lowercase + string.digits, 9),
    ],
    "slack": [
        lambda: f"xoxb-{digits(11)}-{digits(13)}-{pick(ALNUM, 24)}",
        lambda: f"xoxp-{digits(11)}-{digits(11)}-{digits(13)}-{pick(HEX, 32)}",
        lambda: f"xoxa-2-{digits(11)}-{digits(12)}-{digits(12)}-{pick(HEX, 64)}",
        lambda: f"xoxr-{digits(11)}-{digits(13)}-{pick(ALNUM, 24)}",
        lambda: f"xoxs-{digits(11)}-{digits(11)}-{digits(13)}-{pick(HEX, 64)}",
        lambda: f"xoxo-{digits(11)}-{digits(11)}-{digits(13)}-{pick(HEX, 32)}",
        lambda: f"xoxe.xoxp-1-{pick(ALNUM, 150)}",
        lambda: f"xoxe-1-{pick(ALNUM, 140)}",
        lambda: f"xapp-1-A{pick(string.ascii_uppercase + string.digits, 10)}-{digits(13)}-{pick(HEX, 64)}",
        lambda: (
            "https://hooks.slack.com/services/T"
            + pick(string.ascii_uppercase + string.digits, 8)
            + "/B"
            + pick(string.ascii_uppercase + string.digits, 10)
            + "/"
            + pick(ALNUM, 24)
        ),
        lambda: (
            "https://hooks.slack.com/workflows/T"
            + pick(string.ascii_uppercase + string.digits, 10)
            + "/A"
            + pick(string.ascii_uppercase + string.digits, 10)
            + "/"
            + digits(18)
            + "/"
            + pick(ALNUM, 24)
        ),
    ],
    "stripe": [
        *(
            lambda p=p: p + "51" + pick(ALNUM, 97)
            for p in ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "sk_prod_", "rk_prod_")
        ),
        lambda: "sk_live_" + pick(ALNUM, 24),
        lambda: "rk_test_" + pick(ALNUM, 24),
    ],
    "openai": [
        lambda: "sk-proj-" + pick(B64URL, 74) + "T3BlbkFJ" + pick(B64URL, 74),
        lambda: "sk-svcacct-" + pick(B64URL, 74) + "T3BlbkFJ" + pick(B64URL, 74),
        lambda: "sk-admin-" + pick(B64URL, 74) + "T3BlbkFJ" + pick(B64URL, 74),
        lambda: "sk-" + pick(ALNUM, 20) + "T3BlbkFJ" + pick(ALNUM, 20),
        lambda: "sk-proj-" + pick(ALNUM, 48),
    ],
    "anthropic": [
        lambda: "sk-ant-api03-" + pick(B64URL, 93) + "AA",
        lambda: "sk-ant-admin01-" + pick(B64URL, 93) + "AA",
    ],
    "google": [lambda: "AIza" + pick(B64URL, 35)],
    "aws_access_key_id": [lambda p=p: p + pick(AWS_ID, 16) for p in ("AKIA", "ASIA", "ABIA", "ACCA")],
    "npm": [lambda: "npm_" + pick(ALNUM, 36)],
    "pypi": [lambda: "pypi-AgEIcHlwaS5vcmc" + pick(B64URL, 70 + rng.randint(0, 80))],
    "huggingface": [
        lambda: "hf_" + pick(string.ascii_letters, 34),
        lambda: "api_org_" + pick(string.ascii_letters, 34),
    ],
    "sendgrid": [lambda: "SG." + pick(B64URL, 22) + "." + pick(B64URL, 43)],
    "twilio": [lambda: "SK" + pick(HEX, 32)],
}


def jwt() -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    header = part({"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"})
    payload = part({"sub": digits(10), "name": pick(string.ascii_letters, 8), "iat": 1700000000 + rng.randint(0, 9**6)})
    return f"{header}.{payload}.{pick(B64URL, 43)}"


TOKENS["jwt"] = [jwt]

# How a token appears in a text: `{t}` is the token, `{n}` a variable name for it.
PLACINGS = [
    "{t}",
    "export {n}={t}",
    '{n}="{t}"',
    '{{"{n_lower}": "{t}"}}',
    "<{n_lower}>{t}</{n_lower}>",
    "{n_lower}: {t}",
    "The deploy failed until I set {n} to {t} in the CI settings.",
    '{{"config": "line one\\n{t}\\nline two"}}',
    "- rotated key: `{t}`",
    "curl -s https://api.internal/v1 -d token={t}",
]
NAMES = {
    "github": "GITHUB_TOKEN",
    "gitlab": "GITLAB_TOKEN",
    "slack": "SLACK_TOKEN",
    "stripe": "STRIPE_SECRET_KEY",
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GOOGLE_API_KEY",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "npm": "NPM_TOKEN",
    "pypi": "PYPI_TOKEN",
    "huggingface": "HF_TOKEN",
    "sendgrid": "SENDGRID_API_KEY",
    "twilio": "TWILIO_API_KEY",
    "jwt": "ID_TOKEN",
}


def prefixed() -> Iterator[tuple[str, str]]:
    for family, makers in TOKENS.items():
        name = NAMES[family]
        for index, placing in enumerate(PLACINGS):
            for maker in makers:
                text = placing.format(t=maker(), n=name, n_lower=name.lower())
                yield family, text
            if len(makers) < 4:  # families with one or two kinds get a second draw per placing
                for maker in makers:
                    yield family, PLACINGS[(index + 3) % len(PLACINGS)].format(t=maker(), n=name, n_lower=name.lower())


def pem_body() -> str:
    lines = [pick(B64, 64) for _ in range(rng.randint(3, 6))]
    return "\n".join(lines)


def private_keys() -> Iterator[tuple[str, str]]:
    kinds = ["RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "PRIVATE KEY"]
    kinds += ["ENCRYPTED PRIVATE KEY", "PGP PRIVATE KEY BLOCK"]
    for kind in kinds:
        block = f"-----BEGIN {kind}-----\n{pem_body()}\n-----END {kind}-----"
        yield "private_key", block
        yield "private_key", f"Here is the deploy key:\n{block}\nkeep it safe"
        yield "private_key", json.dumps({"private_key": block})  # a literal \n joins the lines
        yield "private_key", f"key = '{block}'"
        yield "private_key", f"ssh_key: |\n  {block.replace(chr(10), chr(10) + '  ')}"
        yield "private_key", f"<key>{block}</key>"


def secret40() -> str:
    return pick(B64, 40)


def aws_secret_keys() -> Iterator[tuple[str, str]]:
    for prefix in ("AKIA", "ASIA", "ABIA", "ACCA"):
        for _ in range(4):
            key_id, secret = prefix + pick(AWS_ID, 16), secret40()
            yield "aws_secret_key", f"aws_access_key_id = {key_id}\naws_secret_access_key = {secret}"
            yield "aws_secret_key", f"export AWS_SECRET_ACCESS_KEY={secret}"
            yield "aws_secret_key", json.dumps({"AccessKeyId": key_id, "SecretAccessKey": secret})
            yield "aws_secret_key", f"aws_secret_key: '{secret}'"


def password(short: bool = False, url: bool = False) -> str:
    if short:
        return pick(ALNUM, rng.randint(4, 7))
    return rng.choice(["", "Password", "password"]) + pick(ALNUM, 6) + rng.choice(["", "!", "-9" if url else "#9"])


def credential_urls() -> Iterator[tuple[str, str]]:
    schemes = ["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "amqp", "https", "ftp", "mssql"]
    hosts = ["db.internal", "10.0.3.7:5432", "cluster0.ab1cd.mongodb.net", "cache.prod:6379", "mq.corp.lan"]
    for index, scheme in enumerate(schemes):
        for short in (False, True):
            user, host = pick(string.ascii_lowercase, 6), hosts[index % len(hosts)]
            url = f"{scheme}://{user}:{password(short, url=True)}@{host}/app"
            yield "credential_url", url
            yield "credential_url", f"DATABASE_URL={url}"
            yield "credential_url", f'{{"dsn": "{url}"}}'
    for _ in range(6):
        yield "credential_url", f"Server=db01;Database=app;User Id=sa;Password={password()};"
        yield "credential_url", f"jdbc:postgresql://db.internal:5432/app?user=svc&password={password()}"
        yield "credential_url", f"git clone https://oauth2:{pick(ALNUM, 20)}@git.corp.lan/team/repo.git"


def authorization() -> Iterator[tuple[str, str]]:
    for _ in range(4):
        opaque, b64 = pick(ALNUM + "-._", 32), base64.b64encode(f"svc:{password()}".encode()).decode()
        yield "authorization", f"Authorization: Bearer {opaque}"
        yield "authorization", f"authorization: Basic {b64}"
        yield "authorization", f'curl -H "Authorization: Bearer {opaque}" https://api.internal/v2/items'
        yield "authorization", f"curl -H 'Authorization: token {pick(ALNUM, 40)}' https://api.github.com/user"
        yield "authorization", f"http GET api.local Authorization:'Basic {b64}'"
        yield "authorization", f'headers = {{"Authorization": "Bearer {opaque}"}}'
        yield "authorization", f"Proxy-Authorization: Basic {b64}"
        yield "authorization", f'curl -H "X-Api-Key: {pick(ALNUM, 32)}" https://api.vendor.io'
        yield "authorization", f"X-Auth-Token: {pick(HEX, 32)}"
        yield "authorization", f"X-Vault-Token: hvs.{pick(ALNUM, 24)}"
        yield "authorization", f"Token: {pick(ALNUM, 32)}"
        yield "authorization", f'curl -H "PRIVATE-TOKEN: {pick(ALNUM, 24)}" https://gitlab.corp.lan/api/v4/projects'
        yield "authorization", f"curl -u admin:{password()} https://jenkins.corp.lan/api/json"
        yield "authorization", f"curl --user deploy:{password(short=True)} -X POST https://registry.lan/v2/"
        yield "authorization", f'curl -u "ci-bot:{password()}" https://nexus.corp.lan'
        yield "authorization", f"wget --http-user=svc --http-password={password()} https://files.lan/a.tgz"


def github_legacy() -> Iterator[tuple[str, str]]:
    for _ in range(6):
        token = pick(HEX, 40)
        yield "github", f"GITHUB_TOKEN={token}"
        yield "github", f"github_token: {token}"
        yield "github", f'{{"github_oauth_token": "{token}"}}'


def twilio_auth() -> Iterator[tuple[str, str]]:
    for _ in range(6):
        yield "twilio", f"TWILIO_ACCOUNT_SID=AC{pick(HEX, 32)}\nTWILIO_AUTH_TOKEN={pick(HEX, 32)}"


# ---- negatives ------------------------------------------------------------------------------------

PLACEHOLDERS = [
    "ghp_" + "x" * 36,
    "ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "glpat-xxxxxxxxxxxxxxxxxxxx",
    "glpat-XXXXXXXXXXXXXXXXXXXX",
    "xoxb-xxxxxxxxxxx-xxxxxxxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx",
    "xoxb-xxxx-xxxx-xxxx",
    "xoxp-0000000000-0000000000-000000000000-00000000000000000000000000000000",
    "AKIAXXXXXXXXXXXXXXXX",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "sk-" + "A" * 48,
    "sk-proj-" + "x" * 48,
    "sk-ant-api03-" + "X" * 95,
    "sk_live_" + "x" * 24,
    "sk_test_" + "0" * 24,
    "npm_" + "X" * 36,
    "hf_" + "x" * 34,
    "SG." + "x" * 22 + "." + "x" * 43,
    "AIza" + "X" * 35,
    "github_pat_" + "X" * 22 + "_" + "X" * 59,
    "<your-github-token>",
    "${GITHUB_TOKEN}",
    "{{ secrets.NPM_TOKEN }}",
    "$OPENAI_API_KEY",
    "ghp_your_token_here",
    "sk-...",
    "xoxb-your-bot-token",
    "REDACTED",
    "********",
]
PLACEHOLDER_PLACINGS = [
    "{t}",
    "export TOKEN={t}",
    '{{"token": "{t}"}}',
    "Set `{t}` as the value in your shell profile.",
    "Authorization: Bearer {t}",
]
CODE = [
    'password = os.environ["DB_PASSWORD"]',
    "token = get_token(user)",
    "def authorization_header(token: str) -> dict[str, str]:\n    return {'Authorization': f'Bearer {token}'}",
    'curl -H "Authorization: Bearer $TOKEN" https://api.github.com/user',
    'curl -u "$USER:$PASSWORD" https://nexus.corp.lan',
    "curl -u user:password https://example.com/api",
    "api_key: str = Field(..., description='the key')",
    "if not secret_key:\n    raise ValueError('SECRET_KEY is not set')",
    "const token = process.env.NPM_TOKEN;",
    "headers['X-Api-Key'] = config.api_key",
    "AWS_SECRET_ACCESS_KEY=$(aws configure get aws_secret_access_key)",
    "postgres://user:${PGPASSWORD}@db.internal/app",
    "postgres://user:<password>@localhost:5432/app",
    "https://user:password@example.com/docs",
    "mysql://root@localhost/test",
    "git@github.com:stormbuffer/stormbuffer.git",
    "ssh://git@github.com/org/repo.git",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "for (let i = 0; i < tokens.length; i++) { total += tokens[i].length; }",
    "SELECT id, password_hash FROM users WHERE email = :email",
    "Authorization: Bearer <token>",
    "Authorization: Basic base64(user:password)",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUF\n-----END CERTIFICATE-----",
    "Keys are stored under ~/.ssh/id_ed25519; the file starts with -----BEGIN OPENSSH PRIVATE KEY-----.",
    "class TokenBucket:\n    def __init__(self, rate: float) -> None:\n        self.rate = rate",
    "import hashlib\ndigest = hashlib.sha256(data).hexdigest()",
    "ENV SECRET_KEY_BASE_FILE=/run/secrets/key_base",
    "npm config set //registry.npmjs.org/:_authToken ${NPM_TOKEN}",
]
MARKDOWN = [
    "GitHub personal access tokens start with `ghp_`, fine-grained ones with `github_pat_`.",
    "## Rotating keys\n\n1. Open the console.\n2. Create a new key.\n3. Revoke the old one.",
    "| Vendor | Prefix |\n|---|---|\n| Stripe | `sk_live_` |\n| Slack | `xoxb-` |\n| GitLab | `glpat-` |",
    "AWS access key ids begin with AKIA (long-lived) or ASIA (temporary).",
    "The sk- prefix marks OpenAI keys; Anthropic keys begin with sk-ant-.",
    "> Never paste a token into a memory. Use the vault instead.",
    "Run `sbuf search 'deploy key'` to find the procedure.",
    "JWTs have three dot-separated parts: header, payload and signature.",
    "See https://docs.github.com/en/authentication for token formats.",
    "Use `curl -u USER:TOKEN` with your own token; never commit it.",
]


def negatives() -> Iterator[tuple[str, str]]:
    for token in PLACEHOLDERS:
        for placing in PLACEHOLDER_PLACINGS:
            yield "placeholder", placing.format(t=token)
    for _ in range(40):
        data = pick(ALNUM, 32).encode()
        yield "hash", f"fixed in {hashlib.sha1(data).hexdigest()}"
        yield "hash", f"sha256: {hashlib.sha256(data).hexdigest()}"
        yield "hash", f"image@sha256:{hashlib.sha256(data).hexdigest()}"
        yield "hash", f'"integrity": "sha512-{base64.b64encode(hashlib.sha512(data).digest()).decode()}"'
        yield "hash", f"md5 {hashlib.md5(data).hexdigest()}  archive.tar.gz"
        yield "uuid", f"record {uuid.UUID(int=rng.getrandbits(128), version=4)} replaced"
        yield "uuid", f"trace_id={uuid.UUID(int=rng.getrandbits(128), version=4).hex}"
    words = "the deploy failed because the cache was cold and the index rebuilt slowly overnight".split()
    for _ in range(40):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 20)))
        yield "base64", base64.b64encode(sentence.encode()).decode()
        yield "prose", sentence.capitalize() + "."
    for _ in range(10):
        digest = hashlib.sha256(pick(ALNUM, 16).encode()).hexdigest()
        yield "hash", f"cache key: {digest}"
        yield "uuid", f"idempotency_key = {uuid.UUID(int=rng.getrandbits(128), version=4)}"
    for text in CODE:
        yield "code", text
    for text in MARKDOWN:
        yield "markdown", text


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    positives = [
        *prefixed(),
        *private_keys(),
        *aws_secret_keys(),
        *credential_urls(),
        *authorization(),
        *github_legacy(),
        *twilio_auth(),
    ]
    for name, rows in (("positives", positives), ("negatives", list(negatives()))):
        with (OUT / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            for family, text in rows:
                handle.write(json.dumps({"family": family, "text": text}, ensure_ascii=False) + "\n")
        print(f"{name}: {len(rows)}")


if __name__ == "__main__":
    main()
