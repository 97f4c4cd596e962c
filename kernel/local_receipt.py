"""What a local completion receipt proves about an Attempt (SPEC §1.7 L3, §2.1 step 1, §2.2).

The runner reads the receipt file and digests its token (the kernel never sees a token); the
kernel decides whether the receipt is this Attempt's, with the one rule L3 states: Run and
Attempt ids equal, the same callback sequence, constant-time digest equality, and the receipt's
start time equal to the Attempt's when the Attempt has one (an Attempt still `starting` takes
it from the receipt, but never one before the Attempt was created: L3's `START_TIME_INVALID`).
Startup recovery and execution control ask the same question, so a
receipt that completes a live Attempt is exactly one that completes it after a restart.
"""

from __future__ import annotations

from kernel.commands import CompleteLocal, LocalReceipt
from kernel.entities import Attempt
from kernel.evidence import CompletedEvidence, ReceiptRead, ReceiptState
from kernel.transitions.run_local import receipt_authenticated

__all__ = ["local_receipt_read"]


def local_receipt_read(attempt: Attempt, receipt: LocalReceipt | None) -> ReceiptRead:
    """§2.1 step 1 for a local Attempt: absent, valid (with the completed evidence), or a
    conflict (a receipt that is not this Attempt's; evidence `unknown(receipt_conflict)`)."""
    if receipt is None:
        return ReceiptRead(ReceiptState.ABSENT)
    if not receipt_authenticated(
        attempt, CompleteLocal(attempt.run_id, attempt.attempt_id, receipt)
    ):
        return ReceiptRead(ReceiptState.CONFLICT)
    if receipt.started_at_ms < attempt.created_at_ms:
        # L3 refuses it (START_TIME_INVALID) and recovery would too: the same answer here.
        return ReceiptRead(ReceiptState.CONFLICT)
    return ReceiptRead(
        ReceiptState.VALID,
        CompletedEvidence(
            outcome=receipt.outcome,
            callback_sequence=receipt.callback_sequence,
            exit_code=receipt.exit_code,
            started_at_ms=receipt.started_at_ms,
        ),
    )
