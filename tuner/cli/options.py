"""Help texts shared by several commands."""

DRAFT_DTYPE_HELP = ("draft dtype (default: --dtype), or int8 on CPU: int8 weights make the draft ~2.5x cheaper; "
                    "output stays lossless, acceptance may drop slightly")
