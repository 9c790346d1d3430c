"""The history and its context: repair of a transcript into a valid request, the request as a pure
function of the journal, prompt-cache marks, the context budget, and the resumable round."""
