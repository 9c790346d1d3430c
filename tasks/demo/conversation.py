"""What the demo's user says, and what the scripted agent does for each line (its cues).

The user's lines read like a real conversation; the directives that make the scripted provider call
a tool, drop a stream or fail on cue live here, in the cues, never in the text a person reads in the
transcript. Workers get them with `BATON_SCRIPTED_CUES=tasks.demo.conversation:CUES`.
"""

from __future__ import annotations

from agent.provider.scripted import Cue

CUES_SPEC = "tasks.demo.conversation:CUES"

WEATHER = "What's the weather like in Paris today?"
WEATHER_LIVE = "What is the weather in Paris today? Use the lookup_weather tool, then answer in one sentence."
OSLO = "Is it raining in Oslo right now?"
NOTE = "Please remind me to buy milk."
PROJECT = "Start the project: note the plan, then write the three step files."
ARCHIVE = "Archive my inbox, please."
INTRODUCE = "Who are you, and what can you do?"

CUES: dict[str, Cue] = {
    WEATHER: Cue('tool:lookup_weather{"city":"Paris"}', "Here's what I found: {results}."),
    # `drop`: the answer's first stream breaks mid-sentence and is replayed.
    OSLO: Cue('tool:lookup_weather{"city":"Oslo"} drop', "Yes: {results}."),
    # The provider is overloaded four times after the note is saved: past the stream budget, so the turn
    # fails once and resumes from the stored round.
    NOTE: Cue('tool:save_note{"note":"buy milk"} fail-after-tools:4', "Done, {results}."),
    # Each answer takes 0.7 s, so the drain lands in the middle of the run, after its first steps.
    PROJECT: Cue(
        'tool:save_note{"note":"plan: step0.txt, step1.txt, step2.txt"} steps:3 slow:0.7',
        "The plan is noted and the three step files are written.",
    ),
    ARCHIVE: Cue('tool:slow_write{"note":"inbox"}', "Archived: {results}."),
    # Asked of two agents: each answers with what it was told and the tools it was given.
    INTRODUCE: Cue("", "I was told: {instructions} My tools: {tools}."),
}
