"""The ShopOps crash harness: kill the loop at every labelled point, resume, check, report."""
