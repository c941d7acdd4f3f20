"""Code: write, complete, fix, explain and translate programs in several languages."""

PROMPTS: tuple[str, ...] = (
    "Write a Python function `merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]` "
    "that merges overlapping closed intervals and returns them sorted. Include a docstring and three "
    "doctest examples, one with touching intervals such as (1, 2) and (2, 3).",

    "Implement an LRU cache class in Python with `get(key)` and `put(key, value)` in O(1) time, "
    "without using functools or OrderedDict. Use a dict plus a doubly linked list and explain the "
    "invariants in comments.",

    "Complete this function so that it returns the n-th Fibonacci number modulo 1_000_000_007 in "
    "O(log n) time:\n\n```python\ndef fib_mod(n: int) -> int:\n    \"\"\"F(0) = 0, F(1) = 1.\"\"\"\n```",

    "The following Python code is meant to count word frequencies but gives wrong results for "
    "'Hello, hello!'. Find the bugs and give a corrected version:\n\n```python\ndef word_counts(text):\n"
    "    counts = {}\n    for word in text.split(' '):\n        counts[word] = counts.get(word, 1) + 1\n"
    "    return counts\n```",

    "Write a SQL query for PostgreSQL that returns, for each customer, their three most recent orders "
    "with the order total, given tables customers(id, name), orders(id, customer_id, created_at) and "
    "order_items(order_id, quantity, unit_price). Use a window function.",

    "Write a Bash script that takes a directory as its argument, finds every `.log` file older than "
    "seven days under it, compresses each with gzip, and prints how many bytes were saved in total. "
    "It must handle file names with spaces.",

    "Implement binary search in Rust as a generic function `fn lower_bound<T: Ord>(xs: &[T], target: &T) "
    "-> usize` that returns the first index whose element is not less than the target. Add unit tests.",

    "Write a TypeScript React component `SearchBox` with a debounced text input (300 ms) that calls an "
    "`onSearch(query: string)` prop, cancels the pending call on unmount, and shows a clear button when "
    "the input is not empty.",

    "Explain line by line what this Python code does and what it prints:\n\n```python\nfrom itertools "
    "import groupby\ndata = 'aaabccddddde'\nprint([(k, len(list(g))) for k, g in groupby(data)])\n```",

    "Translate this Python class to idiomatic Go, with a constructor function and methods on a pointer "
    "receiver:\n\n```python\nclass Counter:\n    def __init__(self):\n        self.n = 0\n    def inc(self, "
    "by=1):\n        self.n += by\n        return self.n\n    def reset(self):\n        self.n = 0\n```",

    "Write a Python asyncio program that downloads a list of URLs with at most 5 requests in flight, "
    "retries each failed request up to 3 times with exponential backoff, and reports the total time. "
    "Use httpx.",

    "Write a C function `char *str_reverse_words(const char *s)` that returns a newly allocated string "
    "with the order of the space-separated words reversed. Handle multiple spaces and document who "
    "frees the memory.",

    "Write pytest tests for a function `parse_duration(s: str) -> int` that converts strings such as "
    "'1h30m', '45s' and '2d' into seconds and raises ValueError on bad input. Cover edge cases with "
    "pytest.mark.parametrize.",

    "Implement Dijkstra's shortest-path algorithm in Python using heapq for a graph given as "
    "`dict[str, list[tuple[str, float]]]`. Return both the distances and a function that rebuilds the "
    "path to any node.",

    "Write a Dockerfile for a FastAPI application that uses a multi-stage build, installs dependencies "
    "from requirements.txt in a virtual environment, runs as a non-root user, and starts uvicorn on "
    "port 8000.",

    "Refactor this JavaScript to use async/await and proper error handling:\n\n```javascript\nfunction "
    "loadUser(id, cb) {\n  fetch('/api/users/' + id).then(function (r) { return r.json(); })\n    "
    ".then(function (u) { cb(null, u); });\n}\n```",

    "Write a Python class `Matrix` that supports addition, multiplication with `@`, transposition and "
    "equality, stores rows as tuples, and raises a ValueError with a helpful message on shape mismatch.",

    "Write a regular expression that matches valid IPv4 addresses (0.0.0.0 to 255.255.255.255, no "
    "leading zeros) and show a Python snippet that extracts all of them from a log line.",

    "Implement a thread-safe token-bucket rate limiter in Java with a method `boolean tryAcquire()` "
    "and a constructor taking capacity and refill rate per second. Explain why your locking is correct.",

    "Write a NumPy function that computes the pairwise Euclidean distance matrix between two arrays of "
    "shape (n, d) and (m, d) without Python loops, and explain how broadcasting makes it work.",
)
