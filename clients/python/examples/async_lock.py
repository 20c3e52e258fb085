"""async_lock.py: the asyncio client; ten tasks take turns on one key."""
import asyncio
import os

import ticketing
import ticketing.aio


async def buyer(c, i, sold):
    try:
        async with c.lock("event-42/seats", lease_ms=10000, wait_ms=10000) as g:
            sold.append((i, g.token))  # a real buyer writes with g.token here
    except ticketing.Error as e:
        print(f"buyer {i}: not acquired: {e.outcome}")


async def main():
    async with ticketing.aio.Client(os.environ["TICKETING_ADDR"],
                                    secret_file=os.environ["TICKETING_SECRET_FILE"]) as c:
        sold = []
        await asyncio.gather(*(buyer(c, i, sold) for i in range(10)))
        tokens = [t for _, t in sold]
        print(f"{len(sold)} buyers served, tokens increasing: {tokens == sorted(tokens)}")
        return len(sold) == 10 and tokens == sorted(tokens)


raise SystemExit(0 if asyncio.run(main()) else 1)
