"""Chat and writing: open-ended prose, advice, emails, comparisons, creative text."""

PROMPTS: tuple[str, ...] = (
    "Write a polite email to a landlord asking for the kitchen tap, which has been leaking for two "
    "weeks, to be repaired, and proposing three times next week when you are at home.",

    "I have an interview for a junior data analyst role on Monday. What questions are they likely to "
    "ask, and how should I prepare over the weekend?",

    "Write a short story of about 300 words about a lighthouse keeper who receives a letter that was "
    "posted forty years ago.",

    "Compare renting and buying a flat in a large city for someone who expects to move for work within "
    "five years. Give the main financial and practical points on each side.",

    "My team keeps missing sprint deadlines. As a new engineering manager, what would you look at first, "
    "and what would you change in the next month?",

    "Write a product description for a stainless-steel insulated water bottle aimed at cyclists. Keep it "
    "under 150 words and avoid exaggerated claims.",

    "Explain to a ten-year-old why the sky is blue and why sunsets are red.",

    "Draft a LinkedIn post announcing that our open-source project just reached version 1.0, thanking "
    "contributors and inviting new ones, in a warm but professional tone.",

    "Write a toast for my sister's wedding. She is a marine biologist, her husband is a chef, and they "
    "met when he cooked at her research station.",

    "What are the pros and cons of working fully remotely compared with a hybrid schedule, for a "
    "software developer early in their career?",

    "Write a haiku sequence of five haiku that follows one day of monsoon rain in a city.",

    "A customer writes: 'I was charged twice for my order and nobody answers the phone.' Write the "
    "support agent's reply, apologising, explaining the next steps and giving a realistic timeline.",

    "Give me a one-week vegetarian dinner plan for two people that uses overlapping ingredients to "
    "limit waste, with a shopping list at the end.",

    "Write a persuasive paragraph arguing that cities should build protected bicycle lanes, and then a "
    "paragraph with the strongest counter-argument.",

    "Describe the character of an old bookshop owner in a mystery novel: appearance, habits, a secret, "
    "and the way she speaks.",

    "How do I tell a close friend that I can't lend them money again without damaging the friendship? "
    "Suggest what to say.",

    "Write a cover letter opening paragraph for a nurse moving into health-care software product "
    "management.",

    "Plan a three-day trip to Jaipur for a family with two teenagers, mixing history, food and some "
    "time to rest, with rough costs.",
)
