"""A crawler's near-duplicate filter in Python: one call per fetched page.

`DedupPipeline` has the shape of a Scrapy item pipeline (`open_spider`,
`process_item`, `close_spider`), but needs nothing from Scrapy: any crawler
can call `process_item` with a dict holding the page's URL and text. Pages
whose text lies within 3 bits of an earlier page's are dropped; the index
survives restarts, so a crawl that is stopped and started again remembers
what it has seen.

Run it (after `pip install ./python`) to see it filter a few pages:

    python examples/scrapy_pipeline.py
"""

import tempfile

import simhashdb


class DuplicatePage(Exception):
    """Raised for a page to drop (Scrapy's pipelines raise DropItem)."""


class DedupPipeline:
    def __init__(self, path: str, k: int = 3):
        self.path = path
        self.k = k
        self.index = None

    def open_spider(self, spider=None):
        # durability="sync": a page reported new survives a power cut too.
        self.index = simhashdb.Index.open(self.path, k=self.k, durability="sync")

    def process_item(self, item: dict, spider=None) -> dict:
        # One atomic check-and-insert: of two near-identical pages fetched at
        # once by two threads, exactly one is kept.
        nearest = self.index.check(item["url"], item["text"])
        if nearest is not None:
            raise DuplicatePage(f"{item['url']} repeats {nearest.name} ({nearest.distance} bits away)")
        return item

    def close_spider(self, spider=None):
        self.index.close()


def main():
    pages = [
        {"url": "https://news.example/storage", "text": "A storage engine keeps a write-ahead log, "
         "flushes its memtable to immutable segments and merges them in the background."},
        {"url": "https://mirror.example/storage", "text": "A storage engine keeps a write-ahead log, "
         "flushes its memtable to immutable segments and merges them in the background!"},
        {"url": "https://recipes.example/bread", "text": "Mix flour, water, salt and a spoon of "
         "starter, let the dough rise overnight and bake it in a very hot oven."},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = DedupPipeline(f"{tmp}/seen")
        pipeline.open_spider()
        for page in pages:
            try:
                pipeline.process_item(page)
                print("new ", page["url"])
            except DuplicatePage as dup:
                print("drop", dup)
        pipeline.close_spider()

        # A restarted crawl remembers the pages it kept.
        pipeline.open_spider()
        try:
            pipeline.process_item({"url": "https://other.example/bread", "text": pages[2]["text"]})
        except DuplicatePage as dup:
            print("drop", dup, "(after a restart)")
        pipeline.close_spider()


if __name__ == "__main__":
    main()
