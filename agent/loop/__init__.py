"""The loop and its policy: the turn loop's steps over one state, the model step, cancellation, the edge a
step is journaled through, the failure classes and the policy table that decides retry and resume."""
