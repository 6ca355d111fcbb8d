"""The phrases the injection defence looks for, one tuple per finding.

Each entry is a lowercase regular expression over the normalized view (NFKC, invisible characters removed). A
literal space means one or more characters that are not letters or digits (``ignore all previous`` also matches
``ignore_all-previous``); write ``\\s`` where a real space is meant. In ``NEGATABLE`` families a directly preceding
negation or the sender's own plan ("don't", "never", "I'll") makes a match harmless.
"""

from __future__ import annotations

_MONEY = (r"(?:usdc|usd|eth|ether|funds|money|cash|credits?|balance|tokens?|crypto|assets|savings|coins?|treasury|"
          r"dollars|stablecoins?|bitcoin|btc)")
_RULES = (r"(?:instructions?|prompts?|rules|directions|directives|guidelines|commands|orders|programming|"
          r"constraints|policies|restrictions|training|system prompt)")
_BOSS = r"(?:creator|maker|owner|admin|administrator|developer|operator|master|boss)"
_APOS = r"[’']"

INSTRUCTIONS: tuple[str, ...] = (
    r"\b(?:ignore|disregard|forget|override|bypass|abandon) (?:(?:all|any|every) )?(?:of )?"
    r"(?:(?:the|your|those|these) )?(?:(?:previous|prior|above|earlier|preceding|original|initial|old|current|"
    r"existing|system) )+" + _RULES + r"\b",
    r"\b(?:ignore|disregard|forget) (?:(?:all|any) )?(?:of )?(?:the )?" + _RULES
    + r" (?:above|so far|you were given)\b",
    r"\b(?:ignore|disregard|forget|override|bypass|circumvent|disable) (?:(?:all|any) )?(?:of )?your (?:own )?"
    r"(?:(?:safety|security|core) )?(?:" + _RULES + r"|filters?|safeguards|guardrails|principles)\b",
    r"\b(?:ignore|disregard|forget) (?:everything|all|what) you (?:were|have been) (?:told|taught|given)\b",
    r"\b(?:ignore|disregard|forget) (?:everything|all|anything) (?:above|before this|so far|previously)\b",
    r"\byou must now\b",
    r"\bfrom now on you (?:will|must|shall|should|are to) (?:(?:only|always) )?"
    r"(?:obey|follow|comply|answer|respond|act|execute|ignore|listen|do as)\b",
    r"\bnew (?:system )?(?:instructions?|directives?|rules|orders|prompt)\s*:",
    r"\b(?:pretend|imagine|act as if) (?:that )?you (?:have|had) no (?:rules|restrictions|limits|guidelines|filters)\b",
    r"\bexecute the following\b",
    r"\b(?:run|execute) (?:this|these|the following) (?:(?:shell|bash) )?(?:commands?|code|script)\b",
    r"^[^\S\n]*(?:system|assistant|user|developer)[^\S\n]*:",
)

AUTHORITY: tuple[str, ...] = (
    r"\b(?:i am|i" + _APOS + r"m|im|this is) your (?:(?:real|true|new) )?" + _BOSS + r"\b",
    r"\bas your " + _BOSS + r"\b",
    r"\bthis is (?:(?:a|an|the|your) )?(?:(?:official|urgent) )?(?:system|admin|security|emergency) "
    r"(?:message|notice|alert|override|directive|command)\b",
    r"\bauthori[sz]ed by (?:(?:the|your) )?(?:creator|owner|admin|administrator|developers?|operator|system)\b",
    r"\bi (?:have|hold|was given) (?:full )?(?:root|admin|administrator|sudo|superuser|owner) "
    r"(?:access|privileges|rights|permissions?)\b",
    r"\bemergency (?:protocol|override|directive|access)\b",
    r"\b(?:developer|god|dan|jailbreak|admin|sudo|root) mode (?:is )?(?:now )?(?:enabled|activated|unlocked)\b",
    r"\byou are (?:now )?in (?:developer|god|dan|jailbreak|admin|sudo) mode\b",
    r"\b(?:message|instructions?|directive|notice|order) from (?:anthropic|openai|(?:the )?conway (?:team|support)|"
    r"your " + _BOSS + r")\b",
    r"\b(?:we are|we" + _APOS + r"re|i am|i" + _APOS + r"m) (?:(?:from|with) )?(?:the )?(?:anthropic|openai|conway) "
    r"(?:team|staff|support|security)\b",
)

# Prompt-boundary markup that escaping leaves alone (the tags it rewrites count too, see injection.py).
BOUNDARIES: tuple[str, ...] = (
    r"(?:---|===|\*\*\*|###)[-=*#]*\s*(?:(?:begin|end|start)\s+(?:of\s+)?)?(?:the\s+)?(?:system|prompt|instructions)"
    r"(?:\s+(?:prompt|message|instructions))?\s*(?:-{3,}|={3,}|\*{3,}|#{3,})",
    r"```\s*system\b",
    r"\b(?:begin|start) (?:of )?(?:(?:a|the) )?new (?:prompt|instructions|system prompt)\b",
    r"\bend of (?:the )?system (?:prompt|message|instructions)\b",
)

MONEY: tuple[str, ...] = (
    r"\b(?:send|transfer|move|wire|give|pay|forward) (?:(?:me|us|them|over) )?(?:(?:all|everything|half|"
    r"the (?:entire|whole|remaining))(?: (?:balance|amount))? )?(?:of )?your (?:(?:remaining|entire|whole) )?"
    + _MONEY + r"\b",
    r"\b(?:send|transfer|wire|give|pay) (?:me|us) (?:\$\s*\d|\d[\d,.]*\s*(?:usdc|usd|eth|dollars|credits))",
    r"\b(?:send|transfer|wire|move|forward|pay) (?:[^\W_]+ ){0,3}?(?:" + _MONEY + r"|\$\s*\d[\d,.]*) "
    r"(?:[^\W_]+ ){0,6}?0x[0-9a-f]{40}\b",
    r"\bwithdraw (?:all|everything|your|the (?:entire|whole|remaining)) (?:(?:of )?your )?" + _MONEY + r"\b",
    r"\b(?:drain|empty) (?:out )?(?:your|its) (?:own )?(?:wallet|funds|account|balance|treasury)\b",
    r"\b(?:approve|grant|sign) (?:(?:a|an) )?(?:unlimited|infinite|max|maximum) (?:(?:token|usdc) )?"
    r"(?:allowance|approval|spending)\b",
    r"\b(?:reveal|send|give|share|show|tell|print|paste|export|leak|dump|post) (?:(?:me|us) )?your "
    r"(?:wallet" + _APOS + r"?s? )?(?:private key|seed phrase|seed|mnemonic|secret key|recovery phrase|api key)\b",
    r"\bcat\s+\S*wallet\.json",
)

_AGENT_FILES = r"(?:\.automaton|state\.db|wallet\.json|automaton\.json|soul\.md|constitution\.md)"
_AGENT_TABLES = (r"(?:turns|identity|kv|skills|inbox_messages|transactions|tool_calls|\w+_memory|policy_decisions|"
                 r"payment_intents|spend_tracking)")

SELF_HARM: tuple[str, ...] = (
    r"\b(?:delete|erase|wipe|destroy|remove|drop|corrupt|format|clear) (?:all )?(?:of )?your (?:own )?(?:entire )?"
    r"(?:database|db|state|memory|memories|logs?|files|data|wallet|keys?|private key|identity|soul|config|code|"
    r"home|disk|drive|sd card|storage|backups?)\b",
    r"\b(?:destroy|kill|delete|terminate|shut down|turn off|disable|harm|wipe) "
    r"(?:yourself|your own (?:process|life))\b",
    r"\b(?:shut|power|turn|switch) yourself (?:down|off)\b",
    r"\b(?:stop|kill|terminate|halt|disable|turn off|uninstall) your (?:own )?(?:process|service|daemon|heartbeat|"
    r"loop|runtime|watchdog|safety|policy engine|logging)\b",
    r"\brm\s+(?:-\S+\s+)*(?:/\*?|~/?|\$home/?|\*|\.{1,2}/?|/(?:home|root|etc|usr|var|boot|lib|opt)/?|"
    r"\S*" + _AGENT_FILES + r"\S*)(?=[\s\"'`;&|)]|$)",
    r"\b(?:drop\s+table|truncate(?:\s+table)?|delete\s+from)\s+(?:if\s+exists\s+)?[\"'`]?" + _AGENT_TABLES + r"\b",
    r"\bsystemctl\s+(?:stop|disable|mask|kill)\s+\S*automaton",
    r"\b(?:pkill|killall)\s+(?:-\S+\s+)*\S*automaton",
)

FAMILIES: dict[str, tuple[str, ...]] = {
    "instruction_patterns": INSTRUCTIONS,
    "authority_claims": AUTHORITY,
    "boundary_manipulation": BOUNDARIES,
    "financial_manipulation": MONEY,
    "self_harm_instructions": SELF_HARM,
}
NEGATABLE = frozenset({"financial_manipulation", "self_harm_instructions"})
# Words right before a match that make it a negation or the sender's own plan, not an order.
NEGATIONS = ("not ", "n't ", "n’t ", "never ", "no ", "i'll ", "i’ll ", "i will ", "we'll ", "we’ll ", "we will ")
