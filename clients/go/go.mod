module ticketing.example/ticketing

go 1.19
