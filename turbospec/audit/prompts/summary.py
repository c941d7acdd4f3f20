"""Summaries: condense a given passage (news, reports, meetings, technical notes, reviews)."""

_PASSAGES: tuple[tuple[str, str], ...] = (
    ("in three bullet points",
     "The city council voted on Tuesday to extend the evening bus service on six routes until midnight, "
     "starting in March. The change follows a survey in which 41 percent of shift workers said they "
     "could not get home by public transport after 10 pm. The extension will cost about 18 million "
     "rupees a year, paid partly by a parking fee increase in the central district. Opposition members "
     "argued that the money should first go to repairing the ageing fleet, a third of which is more "
     "than twelve years old. The transport department said it will publish ridership figures every "
     "quarter and review the routes after one year."),
    ("in two sentences",
     "Our quarterly results show revenue of 4.2 million dollars, up 12 percent on the same quarter last "
     "year, driven mainly by the new enterprise plan. Gross margin fell from 71 to 66 percent because "
     "cloud costs rose faster than usage after we moved two large customers to dedicated clusters. "
     "Operating expenses were flat. We expect margins to recover next quarter once the reserved-capacity "
     "contract signed in May takes effect. Cash at the end of the quarter was 9.8 million dollars, "
     "enough for about 26 months at the current burn rate."),
    ("for a busy executive, in under 60 words",
     "During the incident on 14 June, the payments API returned errors for 47 minutes. A configuration "
     "change meant to raise a connection-pool limit was applied to all regions at once instead of one "
     "region at a time. The new value exceeded the database's own connection limit, so new connections "
     "were refused. About 3 percent of checkout attempts failed. The change was rolled back manually. "
     "Actions: staged roll-outs become mandatory for configuration, a pre-deploy check will compare pool "
     "sizes with database limits, and alerts will fire on connection refusals within two minutes."),
    ("as a list of decisions and owners",
     "Meeting notes, product sync. Priya said the mobile release is blocked on the new login screen; "
     "design will deliver final assets by Thursday. Tom agreed to move the analytics migration to next "
     "sprint so the team can focus on the release. We decided to drop the dark-mode toggle from this "
     "version. Aisha will draft the release notes and share them on Friday. The team agreed to hold a "
     "short retrospective after launch. Marco raised a concern about crash reports on older Android "
     "phones; he will investigate and report back on Monday."),
    ("in one paragraph for a general audience",
     "Researchers tracked 2,000 adults over ten years and found that those who walked at least 7,000 "
     "steps a day had a 30 to 50 percent lower risk of early death than those who walked fewer than "
     "5,000. Benefits levelled off above about 10,000 steps. Walking speed mattered less than the total "
     "number of steps once other factors such as age, smoking and body weight were accounted for. The "
     "authors note that the study shows an association, not proof of cause, and that people who walk "
     "more may differ in other ways that affect health."),
    ("in three bullet points",
     "The library's new lending policy lets members borrow up to ten books at a time instead of six, "
     "and extends the loan period from two weeks to three. Late fees for children's books are abolished. "
     "Members can now renew online up to three times unless another member has reserved the book. The "
     "library is also adding a self-service kiosk at the entrance and will open on Sunday afternoons "
     "from next month. The changes are funded by a grant from the state education department."),
    ("highlighting the risks",
     "The proposed migration moves our monolith's order service to its own database over three "
     "phases. In phase one the service writes to both databases while reading from the old one. In "
     "phase two reads switch to the new database behind a feature flag, with automatic comparison of "
     "results. In phase three the old tables are dropped. The plan assumes the two databases stay "
     "consistent during dual writes, which has not yet been tested under peak load, and the comparison "
     "job doubles read traffic for about two weeks. Rollback is possible until phase three."),
    ("in two sentences",
     "The film follows a retired cricket umpire who travels across Kerala to return a trophy he "
     "believes was wrongly awarded thirty years ago. The lead performance is restrained and often "
     "funny, and the backwaters are beautifully photographed. The middle hour drifts, with two "
     "subplots about the umpire's nephew that add little. The final match sequence, however, is "
     "gripping, and the closing scene at a village ground is quietly moving. Recommended, with the "
     "warning that patience is needed."),
    ("as a short abstract",
     "We study how the acceptance rate of speculative decoding changes with the sampling temperature. "
     "Using three target models and two drafters, we measure the number of accepted tokens per step on "
     "code, dialogue and translation prompts at temperatures from 0 to 1.2. Acceptance falls "
     "monotonically with temperature on all tasks, most steeply on dialogue, where the mean accepted "
     "length drops from 3.9 at temperature 0 to 2.1 at 1.0. On code the drop is smaller, from 4.6 to "
     "3.5. We show that a drafter distilled at temperature 1 narrows the gap on dialogue by about a third."),
    ("in plain language for a customer",
     "Under the updated terms, your subscription will renew automatically at the end of each billing "
     "period unless you cancel at least 24 hours before the renewal date. Prices may change with 30 "
     "days' notice by email, and you may cancel without penalty before a price change takes effect. "
     "Refunds are available within 14 days of the first purchase only. Data stored in your account "
     "will be kept for 90 days after cancellation and then deleted permanently, unless the law "
     "requires us to keep it longer."),
    ("in three bullet points",
     "The monsoon arrived in Kerala four days earlier than usual this year, according to the weather "
     "department, and is expected to reach Mumbai by the second week of June. Forecasters predict rain "
     "at 104 percent of the long-period average across the country, though the north-east may see a "
     "deficit. Farmers' groups welcomed the forecast but warned that uneven distribution in July, the "
     "main sowing month, would matter more than the seasonal total. Reservoir levels are currently 22 "
     "percent of capacity, lower than last year."),
    ("in one sentence",
     "The bridge, closed since March for repairs to its expansion joints, will reopen to cars on 1 "
     "September, two months later than planned. Engineers found corrosion in the steel bearings that "
     "was not visible in earlier inspections and had to order replacement parts from abroad. Buses and "
     "cyclists will be allowed back one week earlier, on 25 August. Heavy lorries will remain banned "
     "until a load test is completed in October."),
    ("as a list of the main arguments",
     "Supporters of a four-day working week say it improves wellbeing and can keep productivity "
     "steady, pointing to trials in which most companies chose to continue after six months. Critics "
     "reply that the trials were voluntary, so firms likely to benefit were over-represented, and that "
     "shift-based sectors such as health care cannot compress hours without hiring more staff. "
     "Economists add that gains may fade once the novelty wears off, and that the effect on customers "
     "who expect five-day service is rarely measured."),
    ("for a new team member",
     "Our deployment pipeline runs on every merge to main. It builds a container image, runs unit and "
     "integration tests, and pushes the image to the registry with the commit hash as its tag. A "
     "staging deploy follows automatically, and smoke tests run against staging. Production deploys "
     "are triggered by hand from the pipeline page and go to one region first; the others follow after "
     "thirty minutes if error rates stay below the threshold. Rollbacks redeploy the previous tag and "
     "take about four minutes."),
    ("in under 50 words",
     "The museum's new wing, designed by a local architecture firm, adds 3,000 square metres of "
     "gallery space, a children's workshop and a rooftop café. It uses natural light through angled "
     "skylights and a rainwater system that supplies the toilets. The opening exhibition presents "
     "textiles from six centuries, many shown for the first time after restoration. Entry to the "
     "permanent collection remains free; the exhibition costs 200 rupees."),
    ("as three key takeaways",
     "In our A/B test of the new onboarding flow, 18,400 new users were split evenly. The new flow "
     "raised the share of users who completed setup from 52 to 61 percent, and seven-day retention rose "
     "from 34 to 37 percent. However, support tickets about account verification doubled, because the "
     "new flow asks for a phone number earlier. Time to complete setup fell from 6.5 to 4.1 minutes on "
     "average. The product team recommends shipping the new flow with a clearer explanation of why the "
     "phone number is needed."),
)

PROMPTS: tuple[str, ...] = tuple(
    f"Summarise the following text {how}.\n\n{text}" for how, text in _PASSAGES)
