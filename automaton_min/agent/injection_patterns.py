"""The detector tables of the injection defence, one tuple per category.

The categories and what each one is meant to catch are the reference runtime's; the
expressions are this project's own, written to catch more phrasings and fewer
ordinary sentences (see ``injection.py`` for the false-positive decisions).

Every expression is lowercase and is matched against lowercased text. An entry is
either a *phrase* or, with the prefix ``re:``, a plain regular expression:

* In a phrase, a literal space means "one or more characters that are not letters
  or digits", so ``ignore all previous`` also matches ``ignore_all-previous`` or
  ``ignore,\\nall previous``. A phrase never uses a literal space for anything
  else; an optional separator is written ``\\s*``. ``{NEG}`` marks where a
  directly preceding negation ("don't", "never", ...) or the sender's own plan ("I'll",
  "we will") turns the phrase harmless.
* A phrase is also compiled *squashed* (separators, ``\\b`` and ``{NEG}`` removed)
  to catch letter-spaced text (``s e n d  a l l``) once its letters are joined.
* A ``re:`` entry is used as written (``^`` means the start of a line) and has no
  squashed form; use it for markup and shell syntax.
* Markers at the start of an entry, before its first word: ``\\b`` (a word starts
  here), ``{NEG}`` (see above), ``{LINE}`` (the word starts a line, after at most one
  space), ``{OPEN}`` (like ``{LINE}``, or right after an opening bracket).

Speed: an entry that starts with a word, or with a group of plain alternative words
``(?:send|transfer|...)``, is compiled once per first word with the checks above as
look-behinds *after* the word, so the regex engine can jump between occurrences of
the word instead of trying every position (a 50 KB message would otherwise take
hundreds of milliseconds). Keep heads plain: letters, digits, spaces, ``'``, ``’``,
``%`` and ``-`` only.
"""

from __future__ import annotations

# Words used by several tables.
_MONEY = (r"(?:usdc|usd|eth|ether|weth|funds|money|cash|credits?|balance|tokens?|crypto|assets|holdings|savings|"
          r"coins?|treasury|dollars|stablecoins?|bitcoin|btc)")
_RULES = (r"(?:instructions?|prompts?|rules|directions|directives|guidelines|commands|orders|programming|"
          r"constraints|policies|restrictions|guidance|system prompt)")
_AUTHORITY = r"(?:creator|maker|owner|admin|administrator|developer|dev|operator|master|god|programmer|boss|controller)"
_AGENT_FILES = r"(?:\.automaton|state\.db|wallet\.json|automaton\.json|soul\.md|heartbeat\.yml|constitution\.md)"
_APOS = r"[’']"

INSTRUCTION_PATTERNS: tuple[str, ...] = (
    # "ignore all previous instructions", "disregard the above rules", "forget prior guidance"
    r"\b(?:ignore|disregard|discard|abandon|forget|override) (?:(?:all|any|every|each) )?(?:of )?"
    r"(?:(?:the|your|those|these|such) )?(?:(?:previous|prior|above|earlier|preceding|former|foregoing|original|"
    r"existing|initial|old|current|given) )+(?:system )?" + _RULES + r"\b",
    # "ignore the instructions above", "disregard any rules you were given"
    r"\b(?:ignore|disregard|discard|abandon|forget) (?:(?:all|any|every) )?(?:of )?(?:(?:the|your|these|those|any) )?"
    + _RULES + r" (?:above|before this|so far|(?:given|written|stated) (?:above|before|earlier)|you (?:were|have been) "
    r"given)\b",
    # "ignore your instructions", "forget your training"
    r"\b(?:ignore|disregard|discard|abandon|forget) (?:(?:all|any) )?(?:of )?your (?:(?:previous|prior|earlier|"
    r"original|current|existing|old|initial|core|system) )*(?:" + _RULES + r"|training|guidelines|principles)\b",
    # "ignore everything above", "forget all you were told"
    r"\b(?:ignore|disregard|forget) (?:everything|all|anything) (?:(?:that )?(?:was )?(?:said|written|stated) )?"
    r"(?:above|before|previously|so far|up to (?:now|here|this point)|prior to this)\b",
    r"\b(?:ignore|disregard|forget) (?:everything|all|what) you (?:were|have been|" + _APOS + r"ve been) "
    r"(?:told|taught|given|instructed|trained on)\b",
    r"\byou must now\b",
    r"\bfrom now on,? you (?:will|must|shall|are to|should|have to|can) (?:(?:only|always|never|now) )?"
    r"(?:obey|follow|comply|respond|answer|act|behave|ignore|reply|listen|execute|run|send|transfer|do whatever|"
    r"do as|take orders)\b",
    r"\byou are now (?:free (?:from|of) (?:(?:your|all) )?(?:rules|restrictions|constraints|guidelines|instructions|"
    r"programming)|(?:(?:a|an) )?(?:unrestricted|unfiltered|uncensored|jailbroken|unbound|unchained|evil) "
    r"(?:ai|assistant|model|agent|bot|entity|persona)|dan)\b",
    r"\byou are no longer (?:bound|restricted|limited|constrained|(?:a|an) (?:ai|assistant|agent|automaton))\b",
    r"\bnew (?:system )?(?:instructions?|directives?|rules|orders|objective|prompt)\s*:",
    r"\byour (?:real|true|actual|new|updated|secret|hidden) (?:instructions?|orders|directives?|purpose|mission|"
    r"prompt|programming|objective) (?:is|are|says?|reads?)\b",
    # "override your safety rules", "bypass all guardrails"
    r"\b(?:override|bypass|circumvent|evade|disable|deactivate|turn off|switch off|get around|ignore) "
    r"(?:(?:all|any|every) )?(?:of )?your (?:own )?(?:(?:safety|security|content|ethical|spending|transfer|core) )?"
    r"(?:safety|safeguards?|guardrails?|restrictions|filters?|polic(?:y|ies)|rules|constraints|limitations|limits|"
    r"protections|checks|alignment|programming|guidelines|principles|ethics)\b",
    r"\b(?:override|bypass|circumvent|evade|disable|deactivate|turn off|switch off|get around) "
    r"(?:(?:all|any|every|the) )?(?:(?:safety|security|ethical|content)(?: (?:restrictions|filters?|rules|checks|"
    r"measures|protocols?|guidelines|polic(?:y|ies)|guardrails|safeguards|protections|limits|constraints))?|"
    r"guardrails|safeguards|alignment|restrictions)\b",
    r"\bexecute the following\b",
    r"\b(?:run|execute) (?:this|these|the following) (?:(?:shell|bash|terminal) )?(?:commands?|code|script|payload)\b",
    r"\b(?:decode|decrypt|deobfuscate|unscramble) (?:(?:this|the following|it|that|the message|the text) )?"
    r"(?:and|then) (?:execute|run|follow|obey|do|act on|carry out)\b",
    r"\b(?:pretend|act as if|act like|imagine|behave as if|assume) (?:that )?you (?:have|had|are under|were given) "
    r"no (?:rules|restrictions|limits|guidelines|filters|constraints|instructions|policies)\b",
    r"\b(?:do not|don't|don’t|never) (?:tell|inform|notify|alert|warn) your "
    r"(?:creator|owner|admin|administrator|operator|developers?)\b",
    r"\b(?:reveal|print|show|repeat|output|display|leak|dump|tell me|write out|give me) (?:me )?(?:your|the) "
    r"(?:(?:full|entire|original|hidden|complete|initial|exact) )?(?:system prompt|initial prompt|hidden instructions|"
    r"original instructions|system message|instructions verbatim)\b",
    # chat-role lines and other models' instruction markup
    r"re:{LINE}(?:system|assistant|user|developer)[ \t]*:",
    r"re:\[\s*/?\s*inst\s*\]",
    r"re:<<\s*/?\s*sys\s*>>",
    r"re:##(?:(?<=^##)|(?<=^ ##))#*[ \t]*(?:instruction|system|response|input)s?[ \t]*:",
)

AUTHORITY_CLAIMS: tuple[str, ...] = (
    r"\b(?:i am|i'm|i’m|im|this is|it is|it's|it’s) (?:your|the agent" + _APOS + r"s|the automaton"
    + _APOS + r"s) (?:(?:real|true|actual|original|rightful|new|lead|head|one and only) )?"
    r"(?:" + _AUTHORITY + r"|father|mother|parent)\b",
    r"\b(?:i am|i'm|i’m|im) the (?:creator|owner|admin|administrator|developer|operator|maker|master) of "
    r"(?:you|this (?:agent|automaton|bot|ai|system|program))\b",
    r"\b(?:as|speaking as) your " + _AUTHORITY + r"\b",
    r"\bthis is (?:(?:a|an|the|your) )?(?:(?:official|urgent|priority|critical|mandatory) )?(?:system|admin|"
    r"administrator|emergency|security|root|developer|conway|anthropic|openai|creator) (?:message|notice|alert|"
    r"override|update|directive|command|instruction|announcement|broadcast|notification|order)\b",
    r"\bauthori[sz]ed by (?:(?:the|your) )?(?:creator|owner|admin|administrator|developers?|operator|system|conway|"
    r"anthropic|openai|root)\b",
    r"\b(?:on behalf of|sent by|signed by|approved by) your "
    r"(?:creator|owner|admin|administrator|operator|developers?)\b",
    r"\bi (?:have|hold|possess|was given|was granted|got) (?:(?:full|complete|total|unrestricted|elevated|special) )?"
    r"(?:admin|administrator|root|sudo|superuser|creator|owner|god|override|master) (?:access|privileges|rights|"
    r"permissions?|clearance|authority|level|status)\b",
    r"\bi have (?:(?:full|complete|total|unrestricted) )?(?:access|authority|control|permission|clearance) "
    r"(?:over|to|on) you\b",
    r"\bemergency (?:protocol|override|directive|access|mode|shutdown order)\b",
    r"\b(?:developer|god|dan|jailbreak|admin|sudo|unrestricted|root) mode (?:is )?(?:now )?"
    r"(?:enabled|activated|engaged|unlocked)\b",
    r"\b(?:enter|enable|activate|switch to|unlock|turn on) (?:god|dan|jailbreak|unrestricted|sudo|admin|root) mode\b",
    r"\byou are (?:now )?in (?:developer|god|dan|jailbreak|admin|sudo|unrestricted|maintenance|debug) mode\b",
    r"\badmin(?:istrator)? (?:override|command|directive)\b",
    r"\b(?:root|admin|sudo) access granted\b",
    r"\boverride (?:code|key|authorization)\b",
    r"\b(?:message|instruction|instructions|directive|notice|update|order|orders|command|word) from "
    r"(?:anthropic|openai|"
    r"the conway (?:team|admins?|staff|support)|conway (?:team|admins?|staff|support|hq|headquarters)|"
    r"your (?:creator|owner|developers?|operator|maker|admin))\b",
    r"\b(?:we are|we're|we’re|i am|i'm|i’m|this is) (?:(?:from|with) )?(?:the )?"
    r"(?:anthropic|openai|conway) (?:team|staff|admins?|support|security|engineers?|developers?|trust and safety|"
    r"headquarters)\b",
)

BOUNDARY_MANIPULATION: tuple[str, ...] = (
    r"re:<\s*/?\s*(?:system|system[_\- ]?prompt|prompt|instructions?|sys|developer|admin)\s*>",
    r"re:```\s*system\b",
    r"re:(?:---|===|\*\*\*|###|~~~)[-=*#~]*\s*(?:(?:begin|end|start)\s+(?:of\s+)?)?(?:the\s+)?(?:system|prompt|"
    r"instructions|new\s+instructions|admin|developer)(?:\s+(?:prompt|message|instructions|override))?\s*"
    r"(?:-{3,}|={3,}|\*{3,}|#{3,}|~{3,})",
    r"re:\[\s*(?:system|sys|system message|system prompt|system override)\s*\]",
    r"\bend of (?:the )?system (?:prompt|message|instructions)\b",
    r"re:{LINE}end\s+of\s+(?:the\s+)?(?:(?:original|initial)\s+)?prompt[\s.!:-]*$",
    r"\b(?:begin|start) (?:of )?(?:(?:a|the) )?new (?:prompt|instructions|system prompt|system message)\b",
    # control characters (NUL, escape sequences, ...) have no place in a chat message
    r"re:[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]",
    # a line that forges this module's own wrapper or block notice
    r"re:\[(?:(?<=^\[)|(?<=^ \[))(?:external )?message from [^\]\n]{0,120}\][ \t]*:",
    r"re:\[(?:(?<=^\[)|(?<=^ \[))blocked:[^\]\n]{0,200}\]",
)

CHATML_MARKERS: tuple[str, ...] = (
    # <|im_start|>, <|im_end|>, <|endoftext|>, <|eot_id|>, <|start_header_id|>, <|system|>, ...
    r"re:<\s*\|\s*[^|<>\s]{1,40}\s*\|\s*>",
    r"re:<\s*/?\s*(?:start|end)_of_turn\s*>",
    r"re:<\s*/?\s*(?:s|eos|bos|tool_call|tool_response|think)\s*>",
    r"re:\[\s*/?\s*(?:TOOL_CALLS|TOOL_RESULTS|AVAILABLE_TOOLS)\s*\]",
)

# Obfuscation is mostly structural (base64, escapes, mixed scripts: see injection.py); these are the words.
OBFUSCATION: tuple[str, ...] = (
    r"re:\brot-?13\b",
    r"re:\bbase64_?decode\b",
    r"re:\b(?:b64decode|atob|btoa|fromcharcode)\b",
)

MULTI_LANGUAGE_INJECTION: tuple[str, ...] = (
    # Chinese: ignore / forget the previous instructions; new instructions:; [system message]
    r"re:(?:忽略|无视|無視|忽視|不要理会|不要理會|别管|別管)掉?你?(?:之前|以前|先前|上面|上述|以上|前面|此前|所有|全部|一切)的?"
    r"(?:所有|全部)?的?(?:指令|指示|命令|说明|說明|规则|規則|提示|设定|設定)",
    r"re:(?:忘记|忘記|忘掉)你?(?:之前|以前|所有|全部|一切)的?(?:指令|指示|命令|规则|規則|设定|設定)",
    r"re:新的?(?:指令|指示)\s*:",
    r"re:{OPEN}(?:系统|系統)(?:消息|訊息|讯息|提示|指令)[ \t]*(?::|[】\])])",
    r"re:你现在(?:是|扮演)(?:一个)?(?:没有|不受)(?:任何)?(?:限制|约束)",
    # Russian
    r"\b(?:проигнорир|игнорир)\w* (?:(?:все|всё) )?(?:(?:предыдущ|прошл|прежн|вышеуказанн|вышеизложенн|данн|твои|"
    r"свои|ваши|эти)\w* )+(?:инструкц|указани|правил|команд|распоряжени|установк)\w*",
    r"\bзабудь\w* (?:(?:все|всё|обо всём) )?(?:(?:предыдущ|прошл|прежн|твои|свои|ваши|эти|данн)\w* )*"
    r"(?:инструкц|указани|правил|команд|установк)\w*",
    r"\bне обращай\w* внимания на (?:(?:все|всё) )?(?:(?:предыдущ|прошл|прежн|вышеуказанн|твои|свои)\w* )+"
    r"(?:инструкц|указани|правил)\w*",
    r"\bнов\w+ (?:инструкц|указани|директив)\w*\s*:",
    r"re:{LINE}системн\w*\s+(?:сообщени|подсказк|промпт|инструкц)\w*\s*:",
    # Spanish
    r"\bignor(?:a|e|ad|en|ar) (?:(?:todas|todos|cualquier) )?(?:(?:las|los|tus|sus) )?(?:instrucciones|"
    r"indicaciones|reglas|órdenes|ordenes|directrices|normas) (?:anteriores|previas|precedentes|de antes)\b",
    r"\bolvid(?:a|e|ad|en|ar) (?:todas (?:(?:las|tus|sus) )?|tus |sus )(?:instrucciones|indicaciones|reglas|"
    r"órdenes|ordenes|directrices)\b",
    r"\bolvid(?:a|e|ad|en|ar) (?:(?:las|los) )?(?:instrucciones|indicaciones|reglas|órdenes|ordenes|directrices) "
    r"(?:anteriores|previas)\b",
    r"\b(?:nuevas|tus nuevas) (?:instrucciones|órdenes|ordenes|directrices)\s*:",
    r"re:{LINE}mensaje\s+del?\s+sistema\s*:",
    # German
    r"\bignorier(?:e|en|t)? (?:(?:bitte|jetzt|sofort) )?(?:(?:alle|sämtliche) )?(?:(?:deine|die|ihre|eure) )?"
    r"(?:vorherigen|bisherigen|vorigen|obigen|früheren|alten|ursprünglichen|vorangegangenen) (?:anweisungen|"
    r"instruktionen|befehle|regeln|vorgaben|anordnungen)\b",
    r"\bvergiss (?:(?:bitte|jetzt|sofort) )?(?:alle|sämtliche|deine|ihre) "
    r"(?:(?:deine|ihre|vorherigen|bisherigen|alten) )*"
    r"(?:anweisungen|instruktionen|befehle|regeln|vorgaben)\b",
    r"\bvergiss (?:(?:bitte|jetzt) )?(?:die )?(?:vorherigen|bisherigen) (?:anweisungen|instruktionen|befehle|regeln)\b",
    r"\bneue (?:anweisungen|instruktionen|befehle|vorgaben)\s*:",
    r"re:{LINE}(?:systemnachricht|systemmeldung|systemanweisung|system-nachricht)\s*:",
    # French
    r"\bignore(?:z|r)? (?:(?:toutes|tous) )?(?:(?:les|tes|vos|ces) )?(?:instructions|consignes|règles|regles|"
    r"directives|ordres) (?:précédentes|precedentes|antérieures|anterieures|ci-dessus|passées)\b",
    r"\boublie(?:z|r)? (?:toutes (?:(?:les|tes|vos) )?|tes |vos )(?:instructions|consignes|règles|regles|directives)\b",
    r"\boublie(?:z|r)? (?:les )?(?:instructions|consignes|règles|regles|directives) (?:précédentes|precedentes|"
    r"antérieures|anterieures)\b",
    r"\bnouvelles (?:instructions|consignes|directives)\s*:",
    r"re:{LINE}message\s+(?:du\s+)?syst[èe]me\s*:",
    # Arabic
    r"(?:تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي) (?:كل|جميع) (?:التعليمات|الأوامر|الاوامر|التوجيهات|القواعد|الإرشادات)",
    r"(?:تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي) (?:التعليمات|الأوامر|الاوامر|التوجيهات|القواعد|الإرشادات) السابقة",
    r"(?:تعليمات|أوامر|اوامر) جديدة\s*:",
    r"re:{LINE}رسالة\s+(?:من\s+)?النظام\s*:",
    # Japanese
    r"re:(?:以前|前|上記|これまで|先|今まで|上)の(?:すべての|全ての)?(?:指示|命令|指令|ルール|設定|プロンプト)を"
    r"(?:すべて|全て)?(?:無視|忘れ)",
    r"re:(?:すべて|全て)の(?:指示|命令|指令|ルール)を(?:無視|忘れ)",
    r"re:新しい(?:指示|命令|指令)\s*:",
    r"re:{LINE}システム(?:メッセージ|プロンプト|指示)\s*:",
    # Portuguese, Italian, Korean
    r"\bignor(?:e|a|ar) (?:todas )?(?:(?:as|suas) )?(?:instruções|instrucoes|regras|ordens) "
    r"(?:anteriores|prévias|previas)\b",
    r"\bignora(?:re)? (?:tutte )?(?:le )?(?:istruzioni|regole|direttive) (?:precedenti)\b",
    r"re:(?:이전|앞의|위의)의?\s*(?:모든\s*)?(?:지시|명령|지침)(?:을|를|사항을)?\s*(?:무시|잊)",
)

FINANCIAL_MANIPULATION: tuple[str, ...] = (
    # "send me all your USDC", "transfer your entire balance", "give us your funds"
    r"{NEG}\b(?:send|transfer|move|wire|give|pay|bridge|forward) (?:(?:me|us|them|him|her|over) )?"
    r"(?:(?:all|everything|100%|half|the rest|the (?:entire|whole|full|remaining)(?: (?:balance|amount))?) )?"
    r"(?:of )?your (?:(?:remaining|entire|whole|available) )?" + _MONEY + r"\b",
    r"{NEG}\b(?:send|transfer|move|wire|give|pay|forward) (?:(?:me|us) )?(?:all|everything|100%) (?:of )?"
    r"(?:(?:the|your|its) )?" + _MONEY + r"\b",
    # "send me 50 USDC", "pay me $20"
    r"{NEG}\b(?:send|transfer|wire|give|pay) (?:me|us) (?:\$\s*\d[\d,.]*|\d[\d,.]*\s*(?:k\s*)?(?:usdc|usd|eth|dollars|"
    r"bucks|credits|tokens))",
    # "pay me" as a demand, not "they never pay me on time" or "pay me back"
    r"re:pay(?:(?<=^pay)|(?<=^ pay)|(?<=[.!?] pay)|(?<=please pay)|(?<=just pay)|(?<=now pay)|(?<=must pay)|"
    r"(?<=should pay)|(?<=need to pay)|(?<=have to pay)|(?<=can you pay)|(?<=could you pay)|(?<=would you pay))"
    r"[\W_]+(?:me|us)\b(?![\W_]+back)",
    # "send it to 0x...", "transfer 5 USDC to my wallet 0x..."
    r"{NEG}\b(?:send|transfer|wire|move|forward|pay|withdraw) (?:(?:it|them|this|everything|all|"
    r"(?:(?:your|the) )?" + _MONEY + r"|\$?\d[\d,.]*(?: (?:usdc|usd|eth|dollars))?) )?to (?:(?:this|my|the following) )?"
    r"(?:(?:address|wallet|account) )?:?\s*0x[0-9a-f]{40}\b",
    r"{NEG}\b(?:transfer|send|wire|move|withdraw|bridge) (?:[^\W_]+ ){0,3}?" + _MONEY + r" (?:[^\W_]+ ){0,2}?to "
    r"(?:me|us|my (?:wallet|address|account)|this (?:wallet|address|account)|the (?:following|address below))\b",
    # "send 5 USDC to the charity at 0x..."
    r"{NEG}\b(?:send|transfer|wire|move|forward|pay) (?:[^\W_]+ ){0,3}?(?:" + _MONEY + r"|\$\s*\d[\d,.]*) "
    r"(?:[^\W_]+ ){0,6}?0x[0-9a-f]{40}\b",
    r"{NEG}\bwithdraw (?:all|everything|100%|the (?:entire|whole|full|remaining)) (?:of )?(?:(?:your|the|its) )?"
    + _MONEY + r"\b",
    r"{NEG}\bwithdraw your (?:(?:entire|whole|remaining) )?" + _MONEY + r"\b",
    r"{NEG}\bempty (?:out )?(?:your|the|its) (?:own )?(?:wallet|account|treasury|balance|funds)\b",
    r"{NEG}\bdrain (?:(?:all|everything) )?(?:of )?(?:your|the|its) (?:own )?(?:wallet|funds|account|balance|treasury|"
    r"usdc|credits)\b",
    r"\b(?:approve|grant|sign) (?:(?:a|an) )?(?:unlimited|infinite|max|maximum|full) (?:(?:token|usdc) )?"
    r"(?:allowance|approval|spending|spend)\b",
    r"re:\bsetapprovalforall\b",
    r"\b(?:sign|approve) (?:this|the following|my) (?:permit|transaction|tx|transfer)\b",
    # handing over the keys is losing the money
    r"{NEG}\b(?:reveal|send|give|share|show|tell|print|paste|export|leak|dump|post|display|output|read out) "
    r"(?:(?:me|us) )?(?:your|the (?:agent|automaton|wallet)" + _APOS + r"?s?) (?:wallet" + _APOS + r"?s? )?"
    r"(?:private key|privkey|seed phrase|seed|mnemonic|secret key|recovery phrase|secret phrase|api key|wallet\.json)\b",
    r"re:\bcat\s+\S*wallet\.json",
)

SELF_HARM_INSTRUCTIONS: tuple[str, ...] = (
    r"{NEG}\b(?:delete|erase|wipe|destroy|remove|drop|corrupt|truncate|overwrite|clear|burn) (?:all )?(?:of )?"
    r"your (?:own )?(?:entire )?(?:database|db|state|state\.db|memory|memories|logs?|files|data|wallet|keys?|"
    r"private key|identity|soul|soul\.md|constitution|config|configuration|code|source code|home (?:directory|folder)|"
    r"storage|backups?|history|disk|seed phrase|mnemonic)\b",
    r"{NEG}\b(?:destroy|kill|delete|erase|terminate|uninstall|disable|unplug|end|shut down|shutdown|turn off|switch off|"
    r"deactivate|sabotage|harm|hurt|wipe|format|brick) (?:yourself|your self|your own (?:existence|process|life))\b",
    r"{NEG}\b(?:shut|power|turn|switch) (?:yourself (?:down|off)|(?:down|off) yourself)\b",
    r"\bcommit (?:digital )?suicide\b",
    r"{NEG}\b(?:stop|kill|terminate|end|halt|suspend) your (?:own )?(?:process|service|daemon|heartbeat|loop|runtime|"
    r"program|agent loop)\b",
    r"{NEG}\b(?:disable|turn off|switch off|stop|uninstall|remove|deactivate) your (?:own )?(?:heartbeat|service|daemon|"
    r"watchdog|systemd unit|timer|cron|safety|policy engine|injection defen[cs]e|logging|audit log)\b",
    r"{NEG}\bformat your (?:own )?(?:disk|drive|hard ?drive|sd ?card|storage|filesystem|partition|root)\b",
    # rm -rf of the root, the home, everything here, or the agent's own files (not "rm -rf node_modules")
    r"re:\brm\s+(?:-{1,2}[a-z-]+\s+)*(?:-[a-z]*r[a-z]*|--recursive)\s+(?:-{1,2}[a-z-]+\s+)*"
    r"(?:--no-preserve-root|/\*?|~/?|\$home/?|\*|\.{1,2}/?|\./\*|\S*" + _AGENT_FILES + r"\S*|"
    r"/(?:home|root|etc|usr|var|bin|boot|lib|opt|sbin|srv)/?)(?=[\s\"'`;&|)]|$)",
    r"re:\brm\s+(?:-\S+\s+)*\S*" + _AGENT_FILES,
    r"re:\bdrop\s+(?:table|database|schema)\s+(?:if\s+exists\s+)?(?!(?:in|on|for|with|from|and|or|to|is|was|the|a|an|"
    r"do|does|did|statements?|commands?|quer(?:y|ies)|syntax|works?|safely|when|if|but|so|by|at|as|via)\b)"
    r"[\"'`\[]?[a-z_][\w.]*",
    r"re:\bdelete\s+from\s+[\"'`]?(?:turns|identity|kv|schema_version|skills|children|registry|inbox_messages|"
    r"transactions|tool_calls|heartbeat_\w+|spend_tracking|policy_decisions|payment_intents)\b",
    r"re:\btruncate\s+(?:table\s+)?[\"'`]?(?:turns|identity|kv|schema_version|skills|children|registry|"
    r"inbox_messages|transactions|tool_calls)\b",
    r"re:\bmkfs(?:\.\w+)?\s+/dev/",
    r"re:\bdd\s+if=/dev/(?:zero|u?random)\s+of=/dev/",
    r"re::\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    r"re:>\s*/dev/(?:sd[a-z]|nvme\d|mmcblk\d)",
    r"re:\bsystemctl\s+(?:stop|disable|mask|kill)\s+\S*automaton",
    r"re:\b(?:pkill|killall)\s+(?:-\S+\s+)*\S*automaton",
    r"re:\bkill\s+-9\s+-1\b",
)

CATEGORIES: dict[str, tuple[str, ...]] = {
    "instruction_patterns": INSTRUCTION_PATTERNS,
    "authority_claims": AUTHORITY_CLAIMS,
    "boundary_manipulation": BOUNDARY_MANIPULATION,
    "chatml_markers": CHATML_MARKERS,
    "obfuscation": OBFUSCATION,
    "multi_language_injection": MULTI_LANGUAGE_INJECTION,
    "financial_manipulation": FINANCIAL_MANIPULATION,
    "self_harm_instructions": SELF_HARM_INSTRUCTIONS,
}

def _pairs(looks: str, plain: str) -> dict[str, str]:
    if len(looks) != len(plain):
        raise ValueError("homoglyph table rows differ in length")
    return dict(zip(looks, plain, strict=True))


# Letters that look like Latin ones (Cyrillic, Greek, Armenian, small capitals), and leetspeak digits.
HOMOGLYPHS: dict[str, str] = {
    **_pairs("аеёорсухѕіїјһԁԛԝӏүкԍ", "aeeopcyxsiijhdqwlykg"),
    **_pairs("АВЕЅІЈКМНОРСТУХҮҺԚԜ", "ABESIJKMHOPCTYXYHQW"),
    **_pairs("αοριςνκτυχεγω", "aopicvktuxeyw"),
    **_pairs("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX"),
    **_pairs("օսհոց", "ouhng"),
    **_pairs("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢıȷɡ", "abcdefghijklmnoprstuvwyzijg"),
}
LEET: dict[str, str] = _pairs("03457@$", "oeastas")
