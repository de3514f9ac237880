"""The old home of the CPU platform and the toy lab, now `xrpo_verl.cpu` and `xrpo_verl.lab`.

Only `register.py` stays: see there why.
"""
