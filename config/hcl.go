package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// ParseHCL applies HCL source (named filename in messages) on top of c:
// a setting named "name" is an attribute, one named "block.name" an
// attribute of a block; anything else in the file is an error, and only
// what the file says is applied.
func (t Table[C]) ParseHCL(c *C, filename string, src []byte) error {
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return fmt.Errorf("parse config: %s", diags.Error())
	}
	top := &hcl.BodySchema{}
	inBlock := map[string][]Setting[C]{} // block → its settings, named without the block
	for _, s := range t.Settings {
		block, name, ok := strings.Cut(s.Name, ".")
		if !ok {
			top.Attributes = append(top.Attributes, hcl.AttributeSchema{Name: s.Name})
			continue
		}
		if _, known := inBlock[block]; !known {
			top.Blocks = append(top.Blocks, hcl.BlockHeaderSchema{Type: block})
		}
		s.Name = name
		inBlock[block] = append(inBlock[block], s)
	}
	content, diags := file.Body.Content(top)
	if diags.HasErrors() {
		return fmt.Errorf("decode config: %s", diags.Error())
	}
	for _, s := range t.Settings {
		if attr, ok := content.Attributes[s.Name]; ok {
			if err := s.decodeHCL(c, filename, s.Name, attr); err != nil {
				return err
			}
		}
	}
	seen := map[string]bool{}
	for _, b := range content.Blocks {
		if seen[b.Type] {
			return fmt.Errorf("decode config: %s: a second %s block; settings of one block go in one", b.DefRange, b.Type)
		}
		seen[b.Type] = true
		schema := &hcl.BodySchema{}
		for _, s := range inBlock[b.Type] {
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: s.Name})
		}
		bc, diags := b.Body.Content(schema)
		if diags.HasErrors() {
			return fmt.Errorf("decode config: %s", diags.Error())
		}
		for _, s := range inBlock[b.Type] {
			if attr, ok := bc.Attributes[s.Name]; ok {
				if err := s.decodeHCL(c, filename, b.Type+"."+s.Name, attr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// decodeHCL sets the setting from an attribute: durations are strings
// such as "5s"; whole numbers stored unsigned must not be negative.
func (s Setting[C]) decodeHCL(c *C, filename, fullName string, attr *hcl.Attribute) error {
	decode := func(v any) error {
		if diags := gohcl.DecodeExpression(attr.Expr, nil, v); diags.HasErrors() {
			return fmt.Errorf("decode config: %s", diags.Error())
		}
		return nil
	}
	switch p := s.field(c).(type) {
	case *string:
		return decode(p)
	case *bool:
		return decode(p)
	case *int:
		return decode(p)
	case *int64:
		return decode(p)
	case *float64:
		return decode(p)
	case *[]string:
		var v []string
		if err := decode(&v); err != nil {
			return err
		}
		*p = v
	case *map[string]string:
		var v map[string]string
		if err := decode(&v); err != nil {
			return err
		}
		*p = v
	case *uint64:
		var v int64
		if err := decode(&v); err != nil {
			return err
		}
		if v < 0 {
			return fmt.Errorf("%s: %s must not be negative", filename, fullName)
		}
		*p = uint64(v)
	case *time.Duration:
		var v string
		if err := decode(&v); err != nil {
			return err
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", filename, fullName, err)
		}
		*p = d
	default:
		return fmt.Errorf("setting %s holds a %T, which a file cannot set", fullName, p)
	}
	return nil
}
