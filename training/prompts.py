"""The training prompts: instructions composed here from templates and subjects, by a seeded draw.

None comes from a set this project evaluates on: they are written for this program across the kinds of request
those sets hold (docs/training.md). Context prompts (context_prompts) hand the target its own answers as texts to
summarize, question or continue; a user's own prompts (source_prompts) take the templates' place."""

from __future__ import annotations

import random

SUBJECTS = ("volcanoes", "honeybees", "the printing press", "black holes", "coral reefs", "the Silk Road",
            "photosynthesis", "the water cycle", "electric cars", "ancient Rome", "the human heart", "glaciers",
            "the moon landing", "recycling", "bread baking", "chess openings", "solar panels", "migrating birds",
            "the stock market", "jazz music", "rainforests", "earthquakes", "vaccines", "the Renaissance",
            "deep sea fish", "wind turbines", "the internet", "tea ceremonies", "desert plants", "lighthouses",
            "comets", "the immune system", "origami", "the Great Wall", "bicycles", "submarines", "mushrooms",
            "the periodic table", "classical ballet", "public libraries", "sleep", "octopuses", "the Olympics",
            "rivers", "telescopes", "coffee", "the French Revolution", "batteries", "wolves", "paper money")
PEOPLE = ("a nurse", "a pirate captain", "a museum guide", "a chef", "a park ranger", "a detective",
          "a medieval knight", "a space station engineer", "a kindergarten teacher", "a travel agent",
          "a lighthouse keeper", "a sports coach", "a librarian", "a street musician", "a farmer")
WRITING = ("Write a short poem about {s}.", "Write a friendly email inviting a colleague to a talk on {s}.",
           "Write a short story for children that involves {s}.", "Write an advertisement for a tour about {s}.",
           "Write a diary entry of someone who just learned about {s}.", "Write a haiku about {s}.",
           "Write a two-paragraph blog post about {s}.", "Write a speech opening for a festival about {s}.")
EXPLAIN = ("Explain {s} to a ten-year-old.", "What are three surprising facts about {s}?",
           "Describe how {s} changed over time.", "Give the pros and cons of {s}.",
           "Why do people find {s} interesting?", "Summarize what scientists know about {s}.",
           "Compare {s} with {t}.", "What questions would you ask an expert on {s}?",
           "List five key terms related to {s} and define each.", "What is the history of {s}?")
ROLES = ("You are {p}. Describe a typical day at work.", "Pretend you are {p}. Give advice to a newcomer.",
         "Act as {p} and explain {s} to a visitor.", "As {p}, write a short note to a friend about {s}.")
HOWTO = ("How do I start learning to {a}?", "Give step-by-step instructions to {a}.",
         "What are common mistakes people make when they {a}?", "Make a one-week plan to {a}.")
ACTIVITIES = ("plant a vegetable garden", "run a 5 km race", "bake sourdough bread", "learn a new language",
              "save money each month", "organize a small library", "paint with watercolors", "train a puppy",
              "prepare for a job interview", "build a bird house", "keep a journal", "fix a flat bicycle tire",
              "plan a picnic", "study for an exam", "start a podcast", "cook a vegetable soup")
CODE = ("Write a {l} function that {c}.", "Write a {l} program that {c}, with an example of its use.",
        "Write {l} code that {c}, and explain each step.")
LANGUAGES = ("Python", "JavaScript", "C", "Java", "Rust", "Go")
CODE_TASKS = ("reverses the words of a sentence", "counts the vowels in a string", "finds the largest of three numbers",
              "checks whether a year is a leap year", "merges two sorted lists", "removes duplicates from a list",
              "computes the average of a list of numbers", "converts Celsius to Fahrenheit",
              "prints a multiplication table", "checks whether a word reads the same backwards",
              "finds the second smallest number in a list", "counts how often each letter occurs in a text",
              "rounds a price to two decimal places", "sorts a list of names by length")
TRANSLATE = ("Translate into French: {x}", "Translate into Spanish: {x}", "Translate into German: {x}")
SENTENCES = ("The library opens at nine and closes at six.", "My brother likes to play the guitar in the evening.",
             "We will visit the museum next weekend.", "The weather was cold, so we stayed inside.",
             "Please close the window before you leave.", "The train to the city leaves every hour.",
             "She bought three apples and a loaf of bread.", "Our team won the match yesterday.")
NAMES = ("Alice", "Bruno", "Chen", "Dara", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jonas", "Keiko", "Lena")
ITEMS = ("apples", "pencils", "books", "marbles", "stickers", "cookies", "coins", "shells")


def _arithmetic(rng: random.Random) -> str:
    a, b, c = rng.randint(3, 40), rng.randint(2, 15), rng.randint(2, 9)
    n, m, item = rng.choice(NAMES), rng.choice(NAMES), rng.choice(ITEMS)
    return rng.choice((
        f"{n} has {a} {item}. {m} gives {n} {b} more, then {n} shares them equally among {c} friends. "
        f"How many does each friend get, and how many are left over? Explain your steps.",
        f"A shop sells {item} at {b} dollars each. {n} buys {a} of them and pays with a {a * b + c * 10} dollar "
        f"note. How much change does {n} get? Show the calculation.",
        f"{n} reads {b} pages a day. The book has {a * c + b} pages. How many days does {n} need to finish it?",
        f"A train travels {a * 10} km in {c} hours. What is its average speed, and how far does it go in "
        f"{b} hours at that speed?"))


def _extraction(rng: random.Random) -> str:
    people = rng.sample(NAMES, 3)
    year, place = rng.randint(1950, 2020), rng.choice(("Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Perth"))
    text = (f"In {year}, {people[0]} moved to {place} to work with {people[1]} on {rng.choice(SUBJECTS)}. "
            f"Two years later {people[2]} joined them.")
    return rng.choice((f"List every person, place and year in this text: {text}",
                       f"Summarize this text in one sentence: {text}",
                       f"Answer in JSON with keys names, place and year: {text}"))


def _reasoning(rng: random.Random) -> str:
    a, b, c = rng.sample(NAMES, 3)
    return rng.choice((
        f"{a} is taller than {b}, and {b} is taller than {c}. Who is the shortest? Explain.",
        f"If all {rng.choice(ITEMS)} in a box are red and this object is in the box, what color is it? Why?",
        f"{a} arrived before {b} but after {c}. In what order did they arrive?",
        f"A clock shows {rng.randint(1, 11)} o'clock. What time will it show after {rng.randint(13, 40)} hours?"))


CONTEXT = ("Summarize the following text in two sentences.\n\n{x}",
           "Read the text below and answer: what is its main point, and which details support it?\n\n{x}",
           "List the people, places and things that the following text names.\n\n{x}",
           "Rewrite the following text in simpler words for a child.\n\n{x}",
           "Here is a text:\n\n{x}\n\nWrite three questions about it, each with its answer.",
           "Continue the following text with one more paragraph.\n\n{x}")
PASSAGE_CHARS = 1200  # a passage's length at most, cut at a word


def context_prompts(passages: list[str], count: int, seed: int) -> list[str]:
    """`count` distinct prompts that hand the target a text to work from, as the summarization, RAG and
    extraction tasks of the evaluated sets do: each a passage of `passages` (the target's own answers to the
    training prompts) in a template of CONTEXT, by a seeded draw; the same for the same arguments."""
    if count < 1:
        raise ValueError(f"`context-prompts` must be at least 1, not {count}")
    cut = [p if len(p) <= PASSAGE_CHARS else p[:PASSAGE_CHARS].rsplit(" ", 1)[0] for p in passages]
    pairs = sorted({(i, t) for i, p in enumerate(cut) if p.strip() for t in range(len(CONTEXT))})
    if len(pairs) < count:
        raise ValueError(f"only {len(pairs)} distinct context prompts can be made from {len(passages)} passages; "
                         f"ask for fewer than {count}")
    random.Random(seed).shuffle(pairs)  # a larger count draws the same first prompts
    return [CONTEXT[t].format(x=cut[i]) for i, t in pairs[:count]]


def training_prompts(count: int, seed: int) -> list[str]:
    """`count` distinct prompts, the same for the same (count, seed)."""
    if count < 1:
        raise ValueError(f"`prompts` must be at least 1, not {count}")
    rng = random.Random(seed)
    makers = (
        lambda: rng.choice(WRITING).format(s=rng.choice(SUBJECTS)),
        lambda: rng.choice(EXPLAIN).format(s=rng.choice(SUBJECTS), t=rng.choice(SUBJECTS)),
        lambda: rng.choice(ROLES).format(p=rng.choice(PEOPLE), s=rng.choice(SUBJECTS)),
        lambda: rng.choice(HOWTO).format(a=rng.choice(ACTIVITIES)),
        lambda: rng.choice(CODE).format(l=rng.choice(LANGUAGES), c=rng.choice(CODE_TASKS)),
        lambda: rng.choice(TRANSLATE).format(x=rng.choice(SENTENCES)),
        lambda: _arithmetic(rng), lambda: _extraction(rng), lambda: _reasoning(rng),
    )
    weights = (3, 4, 2, 2, 3, 1, 2, 1, 1)  # more of the open-ended kinds, whose answers are long
    seen: dict[str, None] = {}
    for _ in range(count * 50):
        if len(seen) == count:
            break
        seen.setdefault(rng.choices(makers, weights)[0](), None)
    if len(seen) < count:
        raise ValueError(f"only {len(seen)} distinct training prompts can be made; ask for fewer than {count}")
    return list(seen)


EVALUATED = ("builtin", "humaneval", "spec-bench:")  # sources whose prompts this project's sweeps evaluate on


def source_prompts(sources: list[str], count: int | None) -> list[str]:
    """The first user turns of `sources` (as sweeps read them: a .jsonl file of {"prompt": TEXT}, a file of one
    prompt a line, ...) in order, each text once, the first `count` of them (None: all). Raises ValueError
    (evaluation.prompts' PromptError for a source that cannot be read) naming the problem."""
    from evaluation.prompts import load_prompts

    texts = list(dict.fromkeys(p.text for source in sources for p in load_prompts(source)))
    if count is not None:
        if count < 1:
            raise ValueError(f"`prompts` must be at least 1, not {count}")
        if len(texts) < count:
            raise ValueError(f"{', '.join(sources)} hold{'s' if len(sources) == 1 else ''} {len(texts)} distinct "
                             f"prompts, fewer than the {count} asked for")
    return texts[:count]
