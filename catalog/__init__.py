"""Pure catalog logic: names, schemas, declarations, budgets, search, activation.

Everything here works on plain JSON values (dicts, lists, str, numbers) and performs no
I/O, so it is fast to test and independent of the mcp SDK's churn.
"""
