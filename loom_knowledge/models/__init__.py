"""Model adapters: the model seam, an offline extractive model, any OpenAI-compatible endpoint."""
