"""The network parts the transformers share: attention, FFN and dropout (:mod:`.layers`), attention masks
(:mod:`.masks`), the search ranges every transformer's default space starts from (:mod:`.search`), and
the sequential wrapper every transformer's backbone is trained and scored through (:mod:`.wrapper`)."""
