module github.com/tempest-actors/tempest/deploy/e2e

go 1.26.0
