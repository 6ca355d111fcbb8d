"""Money rules: the payment guard, the payment ledger, and the payer that uses both."""
