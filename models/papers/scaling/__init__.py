"""Paper 11 (AI scaling up, down and out): teacher, distilled students and a router over specialists."""
