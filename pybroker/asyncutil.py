"""Small asyncio helpers shared by the broker's layers."""
import inspect


async def settle(value):
    """``value``, awaited when it is awaitable: single-node calls answer at once, cluster calls later."""
    if inspect.isawaitable(value):
        return await value
    return value
