"""The TokenSpeed commits dspark's rules were read (and run) at."""

REPOSITORY = "lightseekorg/tokenspeed"
# main, for the GQA DFlash/DSpark and EAGLE-3 drafts
MAIN = "f4d8ec6e"
# the head of PR 1031, the serving change for Kimi-K3 DSpark drafts
PR1031 = "4b9766f6"
