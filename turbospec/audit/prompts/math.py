"""Math and reasoning: word problems, proofs, derivations and step-by-step arithmetic."""

PROMPTS: tuple[str, ...] = (
    "A train leaves a station at 9:00 travelling at 80 km/h. A second train leaves the same station "
    "at 10:30 on the same track at 120 km/h. At what time does the second train catch up? Show each step.",

    "Prove that the square root of 2 is irrational.",

    "Solve the system of equations 3x + 2y = 16 and 5x - 4y = 1, and check your answer.",

    "A shop raises a price by 20% and later lowers the new price by 20%. Is the final price higher, "
    "lower or the same as the original? Explain with numbers.",

    "Compute the derivative of f(x) = x^3 * ln(x) + e^(2x) * sin(x) and simplify.",

    "How many ways are there to arrange the letters of the word BANANA? Explain the counting.",

    "Evaluate the integral of x * e^x from 0 to 1 using integration by parts.",

    "A bag contains 5 red and 7 blue marbles. Two are drawn without replacement. What is the probability "
    "that both are the same colour? Give the exact fraction.",

    "Prove by induction that 1 + 2 + ... + n = n(n + 1) / 2 for every positive integer n.",

    "Find all real solutions of x^2 - 5x + 6 = 0 and of x^2 + x + 1 = 0, and explain the difference "
    "using the discriminant.",

    "A rectangle has a perimeter of 36 cm and an area of 80 square cm. What are its side lengths?",

    "If you invest 10,000 rupees at 8% interest compounded annually, how much will you have after 5 "
    "years? Compare with simple interest over the same period.",

    "What is the remainder when 7^100 is divided by 5? Explain the pattern you use.",

    "Three friends share a bill of 2,340 rupees in the ratio 2:3:4. How much does each pay?",

    "Show that the sum of the angles of any triangle is 180 degrees using parallel lines.",

    "A ladder 10 m long leans against a wall with its foot 6 m from the wall. If the foot slides away at "
    "0.5 m/s, how fast is the top sliding down when the foot is 8 m from the wall?",

    "Find the greatest common divisor of 1071 and 462 with the Euclidean algorithm, showing every step, "
    "and express it as a combination 1071a + 462b.",

    "Is 221 a prime number? Explain how you decide without a calculator.",
)
