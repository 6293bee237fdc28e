"""MedTok: a multimodal (text + ontology graph) medical code tokenizer with a partitioned codebook."""
