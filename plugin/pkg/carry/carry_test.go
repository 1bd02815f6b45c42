package carry

import "testing"

func TestPutTakeDrop(t *testing.T) {
	var s Store[*int]
	if _, ok := s.Take("a"); ok {
		t.Fatal("Take on an empty store found something")
	}
	one, two := 1, 2
	s.Put("a", &one)
	s.Put("b", &two)
	if v, ok := s.Take("a"); !ok || *v != 1 {
		t.Fatalf("Take(a) = %v, %v", v, ok)
	}
	if _, ok := s.Take("a"); ok {
		t.Fatal("Take(a) twice found it again")
	}
	s.Drop("b")
	if _, ok := s.Take("b"); ok {
		t.Fatal("Drop(b) left it")
	}
}
