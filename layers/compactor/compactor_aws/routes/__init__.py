"""API routes as Powertools ``APIRouter`` modules, included by ``functions/compact/compact.py``."""
