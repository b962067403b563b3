"""Find secrets and personal data in a text and replace them with typed placeholders.

Pure text in, text out: no models, no policy (accounts.redaction decides when it runs). The
detectors come from maintained libraries where one fits: detect-secrets' regex plugins for
provider keys and tokens, phonenumbers for phone numbers, python-stdnum for the IBAN and Luhn
checks. Our own small patterns cover what none does: MemoryHub's `mh_` API keys, whole PEM
private-key blocks (detect-secrets only flags the header line), e-mail addresses and the card
number candidates that stdnum's Luhn check then confirms.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import phonenumbers
from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector
from django.db import models
from stdnum import iban, luhn


class RedactionClass(models.TextChoices):
    SECRET = "secret", "Secrets (API keys, tokens, passwords in URLs, private keys)"
    EMAIL = "email", "E-mail addresses"
    PHONE = "phone", "Phone numbers"
    CARD = "card", "Payment card numbers (Luhn-checked)"
    IBAN = "iban", "IBANs"


PII_CLASSES: tuple[str, ...] = (
    RedactionClass.EMAIL,
    RedactionClass.PHONE,
    RedactionClass.CARD,
    RedactionClass.IBAN,
)

# Masks a text under a policy already looked up (accounts.redaction.recall_redactor).
Redactor = Callable[[str], str]

PLACEHOLDER = "[redacted:{kind}]"
# What a stored text looks like after masking: the badge on the pages and recall find these.
PLACEHOLDER_RE = re.compile(r"\[redacted:(secret|email|phone|card|iban)\]")

# The plugins that match a known shape. Left out on purpose: the high-entropy string detectors
# (they flag git SHAs, UUIDs and hashes, ordinary in chats about code), the keyword detector
# (made for source files: `password = x` assignments) and the IBM/Cloudant/Softlayer ones,
# which key on a nearby word and then take any 40-odd characters.
_SECRET_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    ArtifactoryDetector,
    AWSKeyDetector,
    AzureStorageKeyDetector,
    BasicAuthDetector,
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    JwtTokenDetector,
    MailchimpDetector,
    NpmDetector,
    OpenAIDetector,
    PypiTokenDetector,
    SendGridDetector,
    SlackDetector,
    SquareOAuthDetector,
    StripeDetector,
    TelegramBotTokenDetector,
    TwilioKeyDetector,
)

# MemoryHub's own keys, `mh_<8-char prefix>.<32-char secret>` (accounts.models, as
# djangorestframework-api-key generates them): detect-secrets does not know them.
MEMORYHUB_KEY_RE = re.compile(r"(?<![A-Za-z0-9_])mh_[A-Za-z0-9]{8}\.[A-Za-z0-9]{32}(?![A-Za-z0-9])")
# A whole PEM block, or from the header to the end of the text when it was cut off.
PRIVATE_KEY_BLOCK_RE = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# Addresses with a dotted domain and a letters-only top-level part; `user@host` without a dot
# (a prompt, an ssh login) is not one.
EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)
# 13 to 19 digits, optionally grouped by single spaces or dashes, not inside a longer number.
CARD_CANDIDATE_RE = re.compile(r"(?<![\d.,-])\d(?:[ -]?\d){12,18}(?![\d-]|[.,]\d)")
# Issuer prefixes of the networks people paste, with the lengths each issues: a random number
# passes Luhn one time in ten, and prefix and length together narrow that a lot more.
CARD_NETWORKS: tuple[tuple[re.Pattern[str], frozenset[int]], ...] = (
    (re.compile(r"4"), frozenset({13, 16, 19})),  # Visa
    (re.compile(r"5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)"), frozenset({16})),  # Mastercard
    (re.compile(r"3[47]"), frozenset({15})),  # American Express
    (re.compile(r"6(?:011|5|4[4-9])"), frozenset({16, 19})),  # Discover
    (re.compile(r"3(?:0[0-5]|[689])"), frozenset({14, 16})),  # Diners Club
    (re.compile(r"35"), frozenset({16, 19})),  # JCB
    (re.compile(r"62"), frozenset({16, 17, 18, 19})),  # UnionPay
)
# Country code, check digits, then 11 to 30 letters or digits, optionally grouped by spaces.
IBAN_CANDIDATE_RE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")

# Phone numbers are read as written in this region when they carry no country code.
DEFAULT_PHONE_REGION = "US"
# A phone number has at least this many digits: shorter runs are extensions, codes, amounts.
PHONE_MIN_DIGITS = 7


@dataclass(frozen=True)
class Finding:
    """Where a match was and of which class; never its text."""

    kind: str
    start: int
    end: int


@cache
def _secret_plugins() -> tuple[RegexBasedDetector, ...]:
    return tuple(plugin() for plugin in _SECRET_PLUGINS)


# A token the pattern matched only the start of (detect-secrets' JWT pattern stops before the
# signature) is masked up to its last token character.
_TOKEN_TAIL_RE = re.compile(r"[A-Za-z0-9_\-+/=]*")
_DELIMITERS = " \t\r\n\"'=:"


def _secret_span(match: re.Match[str]) -> tuple[int, int]:
    """The part of a plugin's match to mask: the secret group where the pattern has one that
    long (a URL's password, an npm token), else the whole match without the delimiters some
    patterns include, stretched over the rest of the token."""
    if match.re.groups:
        groups = [index for index in range(1, match.re.groups + 1) if match.group(index)]
        longest = max(groups, key=lambda index: len(match.group(index)), default=None)
        if longest is not None and len(match.group(longest)) >= 8:
            return match.span(longest)
    start, end = match.span()
    value = match.group()
    start += len(value) - len(value.lstrip(_DELIMITERS))
    end -= len(value) - len(value.rstrip(_DELIMITERS))
    if not match.re.groups:
        tail = _TOKEN_TAIL_RE.match(match.string, end)
        end = tail.end() if tail else end
    return start, end


def _secrets(text: str) -> Iterator[Finding]:
    for match in MEMORYHUB_KEY_RE.finditer(text):
        yield Finding(RedactionClass.SECRET, *match.span())
    if "PRIVATE KEY" in text and any(True for _ in PrivateKeyDetector().analyze_string(text)):
        for match in PRIVATE_KEY_BLOCK_RE.finditer(text):
            yield Finding(RedactionClass.SECRET, *match.span())
    for plugin in _secret_plugins():
        for pattern in plugin.denylist:
            for match in pattern.finditer(text):
                # The plugin's own checks (a JWT must decode) run on what its pattern matched.
                if any(True for _ in plugin.analyze_string(match.group())):
                    yield Finding(RedactionClass.SECRET, *_secret_span(match))


def _emails(text: str) -> Iterator[Finding]:
    if "@" not in text:
        return
    for match in EMAIL_RE.finditer(text):
        yield Finding(RedactionClass.EMAIL, *match.span())


def _digits(value: str) -> str:
    return "".join(char for char in value if char.isdigit())


def _card_shaped(digits: str) -> bool:
    return any(prefix.match(digits) and len(digits) in lengths for prefix, lengths in CARD_NETWORKS)


def _cards(text: str) -> Iterator[Finding]:
    for match in CARD_CANDIDATE_RE.finditer(text):
        digits = _digits(match.group())
        if _card_shaped(digits) and luhn.is_valid(digits):
            yield Finding(RedactionClass.CARD, *match.span())


def _ibans(text: str) -> Iterator[Finding]:
    for match in IBAN_CANDIDATE_RE.finditer(text):
        if iban.is_valid(match.group()):
            yield Finding(RedactionClass.IBAN, *match.span())


def _phones(text: str, *, region: str) -> Iterator[Finding]:
    if sum(char.isdigit() for char in text) < PHONE_MIN_DIGITS:
        return  # the matcher is the slow detector: most chat turns hold no run of digits
    # Strict grouping: a real, assigned range of its country, written with that country's
    # digit groups (or none), which keeps dates, invoice numbers and order ids out ("2024-000123"
    # is a valid Washington number, but not grouped as one). The matcher skips dates and times.
    for match in phonenumbers.PhoneNumberMatcher(
        text, region, leniency=phonenumbers.Leniency.STRICT_GROUPING
    ):
        raw = match.raw_string
        # A bare run of digits is an id, an amount or a count far more often than a number
        # someone dictates: only an international (+) or grouped one counts.
        if len(_digits(raw)) >= PHONE_MIN_DIGITS and (raw.startswith("+") or not raw.isdigit()):
            yield Finding(RedactionClass.PHONE, match.start, match.end)


def find(
    text: str, classes: Iterable[str], *, phone_region: str = DEFAULT_PHONE_REGION
) -> list[Finding]:
    """The non-overlapping matches of `classes` in `text`, in order. Where two overlap, a secret
    wins, then the one that starts first (then the longer): a card number is not also a phone
    number."""
    wanted = set(classes)
    found: list[Finding] = []
    if RedactionClass.SECRET in wanted:
        found.extend(_secrets(text))
    if RedactionClass.EMAIL in wanted:
        found.extend(_emails(text))
    if RedactionClass.CARD in wanted:
        found.extend(_cards(text))
    if RedactionClass.IBAN in wanted:
        found.extend(_ibans(text))
    if RedactionClass.PHONE in wanted:
        found.extend(_phones(text, region=phone_region))
    # Secrets first (a password in a URL is not an e-mail address), then by position.
    kept: list[Finding] = []
    ranked = sorted(
        found,
        key=lambda item: (item.kind != RedactionClass.SECRET, item.start, item.start - item.end),
    )
    for finding in ranked:
        if not any(finding.start < other.end and other.start < finding.end for other in kept):
            kept.append(finding)
    return sorted(kept, key=lambda item: item.start)


def redact(
    text: str, classes: Iterable[str], *, phone_region: str = DEFAULT_PHONE_REGION
) -> tuple[str, list[Finding]]:
    """`text` with every match of `classes` replaced by `[redacted:<class>]`, and the matches
    (positions in the original text). No match: the same text comes back."""
    if not text:
        return text, []
    findings = find(text, classes, phone_region=phone_region)
    if not findings:
        return text, []
    parts: list[str] = []
    position = 0
    for finding in findings:
        parts.append(text[position : finding.start])
        parts.append(PLACEHOLDER.format(kind=finding.kind))
        position = finding.end
    parts.append(text[position:])
    return "".join(parts), findings


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """How many matches of each class: what the audit log and a refusal may say."""
    return dict(Counter(finding.kind for finding in findings))


def placeholders_in(text: str) -> list[str]:
    """The classes of the placeholders a stored text holds, in order."""
    return PLACEHOLDER_RE.findall(text) if "[redacted:" in text else []
