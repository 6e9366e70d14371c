package aws

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// NewClient returns an EC2 client for region with the credentials found
// the standard AWS way: the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared files and
// AWS_PROFILE, or the instance role. AWS_ENDPOINT_URL (or
// AWS_ENDPOINT_URL_EC2) points it at another endpoint, such as an
// emulator.
func NewClient(ctx context.Context, region string) (*ec2.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return ec2.NewFromConfig(cfg), nil
}
